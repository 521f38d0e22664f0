//go:build agent

package main

// commands are the agent binary's (go build -tags agent, `make
// build-agent`): what a capture site runs, linking none of the server's
// packages — no scheduler, metadata, dashboard, lake or SQL driver — so
// it stays small and holds little memory beside the capture.
func commands() []command {
	return []command{
		agentCommand(),
		importCommand(),
		dnsCommand(),
		rssacCommand(),
		synthCommand(),
		putCommand(),
		getCommand(),
		queuesCommand(),
		blocksCommand(),
		followCommand(),
		streamCommand(),
		siteCommand(),
		loginCommand(),
	}
}
