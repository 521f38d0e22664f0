//go:build !agent

package main

// commands are the full binary's: the server and every client verb.
// Built with -tags agent the binary is the capture site's (see
// commands_agent.go).
func commands() []command {
	return []command{
		serveCommand(),
		putCommand(),
		getCommand(),
		queuesCommand(),
		blocksCommand(),
		followCommand(),
		agentCommand(),
		importCommand(),
		synthCommand(),
		jobCommand(),
		groupCommand(),
		siteCommand(),
		programCommand(),
		graphCommand(),
		statsCommand(),
		faultyCommand(),
		retryCommand(),
		rssacCommand(),
		dnsCommand(),
		windowsCommand(),
		streamCommand(),
		statusCommand(),
		userCommand(),
		retentionCommand(),
		lostCommand(),
		fsckCommand(),
		storeCommand(),
		workerCommand(),
		workersCommand(),
		loginCommand(),
		rotateTokenKeyCommand(),
		anonKeyCommand(),
		metaCopyCommand(),
	}
}
