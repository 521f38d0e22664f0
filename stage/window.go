package stage

import (
	"bytes"
	"time"

	"gopkg.in/yaml.v3"
)

// WindowInput is what a window stage's program reads on stdin: the window,
// its blocks as files, and what is missing or late. Built-ins read it with
// ParseWindowInput.
type WindowInput struct {
	Window struct {
		Stage    string    `yaml:"stage"`
		ID       string    `yaml:"id"`
		Instance string    `yaml:"instance"` // "all" for windows across sites
		From     time.Time `yaml:"from,omitempty"`
		To       time.Time `yaml:"to,omitempty"`
		FirstSeq uint64    `yaml:"first_seq,omitempty"`
		LastSeq  uint64    `yaml:"last_seq,omitempty"`
		Revision int       `yaml:"revision"`
		Reason   string    `yaml:"reason"`
	} `yaml:"window"`
	Blocks  []WindowBlock `yaml:"blocks"`
	Missing []string      `yaml:"missing"` // INSTANCE:SEQ
	Late    []string      `yaml:"late"`
}

// WindowBlock is one of a window's blocks, as a file the run may read.
type WindowBlock struct {
	Name     string    `yaml:"name"`
	Instance string    `yaml:"instance"`
	Seq      uint64    `yaml:"seq"`
	Time     time.Time `yaml:"time"` // of its first packet
	Path     string    `yaml:"path"`
}

// WindowInputPrefix starts every WindowInput document, so a built-in
// can tell one from a block.
const WindowInputPrefix = "window:\n"

// ParseWindowInput reads a window stage's input document; ok is false
// when the input is not one (a built-in run as a block stage).
func ParseWindowInput(data []byte) (WindowInput, bool, error) {
	var in WindowInput
	if !bytes.HasPrefix(data, []byte(WindowInputPrefix)) {
		return in, false, nil
	}
	err := yaml.Unmarshal(data, &in)
	return in, true, err
}
