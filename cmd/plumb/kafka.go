//go:build !agent

package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/plumb-dev/plumb/kafkapub"
)

// kafkaFlags are where builtin:kafka publishes: the server's (and a
// worker's) to set, never a job's.
type kafkaFlags struct {
	brokers, sasl, tlsCA string
	tls                  bool
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.brokers, "kafka-brokers", "", "`HOST:PORT[,…]` of the Kafka cluster builtin:kafka publishes to")
	fs.BoolVar(&k.tls, "kafka-tls", false, "reach the Kafka brokers over TLS (the system's roots, or --kafka-tls-ca)")
	fs.StringVar(&k.tlsCA, "kafka-tls-ca", "", "PEM `FILE` of the CA that signed the Kafka brokers' certificates (implies --kafka-tls)")
	fs.StringVar(&k.sasl, "kafka-sasl", "", "SASL `MECHANISM` for Kafka: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, with the user and password in PLUMB_KAFKA_USER and PLUMB_KAFKA_PASSWORD")
}

func (k *kafkaFlags) config() (kafkapub.Config, error) {
	var c kafkapub.Config
	if k.brokers == "" {
		if k.tls || k.tlsCA != "" || k.sasl != "" {
			return c, fmt.Errorf("--kafka-tls, --kafka-tls-ca and --kafka-sasl need --kafka-brokers")
		}
		return c, nil
	}
	for _, b := range strings.Split(k.brokers, ",") {
		c.Brokers = append(c.Brokers, strings.TrimSpace(b))
	}
	if k.tls || k.tlsCA != "" {
		c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if k.tlsCA != "" {
			pem, err := os.ReadFile(k.tlsCA)
			if err != nil {
				return c, fmt.Errorf("--kafka-tls-ca: %w", err)
			}
			c.TLS.RootCAs = x509.NewCertPool()
			if !c.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return c, fmt.Errorf("--kafka-tls-ca %s: no PEM certificate in it", k.tlsCA)
			}
		}
	}
	if k.sasl != "" {
		c.Mechanism, c.User, c.Password = k.sasl, os.Getenv("PLUMB_KAFKA_USER"), os.Getenv("PLUMB_KAFKA_PASSWORD")
		if c.User == "" {
			return c, fmt.Errorf("--kafka-sasl %s: set PLUMB_KAFKA_USER and PLUMB_KAFKA_PASSWORD", k.sasl)
		}
	}
	return c, c.Check()
}
