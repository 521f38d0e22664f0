//go:build agent

package main

import (
	"context"
	"errors"

	"github.com/plumb-dev/plumb/agent"
)

// errS3Agent says where s3:// sources are: the agent build links no
// blob store (TestAgentBuild).
var errS3Agent = errors.New("s3:// sources are read by the full build of plumb, not the agent build (it links no S3 client): run plumb import or plumb agent from the full build")

func s3Sources(context.Context, string) ([]agent.Source, error) { return nil, errS3Agent }

func s3Lister(context.Context, string) (func(context.Context) ([]agent.Source, error), string, error) {
	return nil, "", errS3Agent
}
