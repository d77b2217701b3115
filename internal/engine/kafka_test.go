package engine

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pipeline-run/pipeline/config"
)

// fakeBroker starts a one-broker kfake cluster with opts and returns its
// address.
func fakeBroker(t *testing.T, opts ...kfake.Opt) string {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// securedConfig parses a pipeline config for the broker at addr with the
// given connection settings (YAML lines), as a user would write it.
func securedConfig(t *testing.T, addr, settings string) *config.Config {
	t.Helper()
	body := "name: t\nbrokers: [" + addr + "]\nsources: {in: {topics: [in]}}\nsinks: {out: {topic: out}}\n" + settings
	cfg, err := config.Parse([]byte(body), "test.yaml", noEnv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// listBrokers asks the cluster for its brokers with a client built from
// cfg alone. The bounded retries only make a refused connection fail sooner.
func listBrokers(t *testing.T, cfg *config.Config) error {
	t.Helper()
	opts, err := ClientOpts(cfg, nil, nil)
	if err != nil {
		t.Fatalf("ClientOpts: %v", err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(1), kgo.RetryTimeout(5*time.Second))...)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bs, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err == nil && len(bs) == 0 {
		return errors.New("the cluster listed no brokers")
	}
	return err
}

func TestSASLMechanisms(t *testing.T) {
	// One user per mechanism, each known to that mechanism only: a client
	// that authenticates with another mechanism than configured fails.
	addr := fakeBroker(t, kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "user-256", "pass-256"),
		kfake.Superuser("SCRAM-SHA-512", "user-512", "pass-512"),
	)
	// refused is "" when the broker must answer, else what the error says.
	// kfake drops the connection on a failed authentication: EOF.
	tests := []struct {
		name     string
		settings string
		refused  string
	}{
		{"PLAIN authenticates", "sasl: {mechanism: PLAIN, username: plain-user, password: plain-pass}", ""},
		{"SCRAM-SHA-256 authenticates", "sasl: {mechanism: SCRAM-SHA-256, username: user-256, password: pass-256}", ""},
		{"SCRAM-SHA-512 authenticates", "sasl: {mechanism: SCRAM-SHA-512, username: user-512, password: pass-512}", ""},
		{"a mechanism in lower case authenticates", "sasl: {mechanism: scram-sha-512, username: user-512, password: pass-512}", ""},
		{"PLAIN with a wrong password is refused", "sasl: {mechanism: PLAIN, username: plain-user, password: nope}", "EOF"},
		{"SCRAM-SHA-256 with a wrong password is refused", "sasl: {mechanism: SCRAM-SHA-256, username: user-256, password: nope}", "EOF"},
		{"SCRAM-SHA-512 with a wrong password is refused", "sasl: {mechanism: SCRAM-SHA-512, username: user-512, password: nope}", "EOF"},
		{"a SCRAM-SHA-256 user is refused over SCRAM-SHA-512", "sasl: {mechanism: SCRAM-SHA-512, username: user-256, password: pass-256}", "EOF"},
		{"a SCRAM-SHA-512 user is refused over SCRAM-SHA-256", "sasl: {mechanism: SCRAM-SHA-256, username: user-512, password: pass-512}", "EOF"},
		{"a SCRAM user is refused over PLAIN", "sasl: {mechanism: PLAIN, username: user-256, password: pass-256}", "EOF"},
		{"a PLAIN user is refused over SCRAM", "sasl: {mechanism: SCRAM-SHA-256, username: plain-user, password: plain-pass}", "EOF"},
		{"no SASL is refused", "", "is SASL missing?"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkRefused(t, listBrokers(t, securedConfig(t, addr, tc.settings)), tc.refused)
		})
	}
}

// checkRefused checks a request's error against refused: "" for none,
// else text the error must contain.
func checkRefused(t *testing.T, err error, refused string) {
	t.Helper()
	switch {
	case refused == "" && err != nil:
		t.Fatalf("refused: %v", err)
	case refused != "" && err == nil:
		t.Fatalf("the broker answered; want an error with %q", refused)
	case refused != "" && !strings.Contains(err.Error(), refused):
		t.Fatalf("refused with %v; want an error with %q", err, refused)
	}
}

func TestClientOptsRefusesAnUnknownMechanism(t *testing.T) {
	// Validation refuses it first; ClientOpts must not fall back to no
	// authentication for a Config built by hand.
	cfg := securedConfig(t, "127.0.0.1:9", "")
	cfg.SASL = config.SASL{Mechanism: "GSSAPI", Username: "u", Password: "p"}
	if _, err := ClientOpts(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), `sasl.mechanism: unknown mechanism "GSSAPI"`) {
		t.Fatalf("got %v", err)
	}
}

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newECKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func randomSerial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := newECKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs a leaf certificate for a server (with its names) or a client.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key := newECKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certPEM, keyPEM
}

func writePEM(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := newCA(t, "pipeline test CA"), newCA(t, "another CA")
	server, _, _ := ca.issue(t, "broker", x509.ExtKeyUsageServerAuth, []string{"broker.test"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	_, clientCert, clientKey := ca.issue(t, "pipeline", x509.ExtKeyUsageClientAuth, nil, nil)
	_, strayCert, strayKey := other.issue(t, "pipeline", x509.ExtKeyUsageClientAuth, nil, nil)
	caFile := writePEM(t, dir, "ca.pem", ca.pem)
	otherFile := writePEM(t, dir, "other-ca.pem", other.pem)
	certFile, keyFile := writePEM(t, dir, "client.pem", clientCert), writePEM(t, dir, "client-key.pem", clientKey)
	strayCertFile, strayKeyFile := writePEM(t, dir, "stray.pem", strayCert), writePEM(t, dir, "stray-key.pem", strayKey)

	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.cert)
	plainTLS := fakeBroker(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{server}, MinVersion: tls.VersionTLS12}))
	mutualTLS := fakeBroker(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{server}, MinVersion: tls.VersionTLS12,
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}))

	const unknownCA = "x509: certificate signed by unknown authority"
	tests := []struct {
		name     string
		broker   string
		settings string
		refused  string // as for TestSASLMechanisms
	}{
		{"the configured CA verifies the broker", plainTLS, "tls: {enabled: true, ca_file: " + caFile + "}", ""},
		{"a CA file alone turns TLS on", plainTLS, "tls: {ca_file: " + caFile + "}", ""},
		{"another CA does not verify the broker", plainTLS, "tls: {enabled: true, ca_file: " + otherFile + "}", unknownCA},
		{"the system roots do not verify a private CA", plainTLS, "tls: {enabled: true}", unknownCA},
		{"a plain connection to a TLS listener fails", plainTLS, "", "is TLS missing?"},
		{"the server name is checked against the certificate", plainTLS, "tls: {enabled: true, ca_file: " + caFile + ", server_name: other.test}",
			"certificate is valid for broker.test, not other.test"},
		{"the configured server name is the one verified", plainTLS, "tls: {enabled: true, ca_file: " + caFile + ", server_name: broker.test}", ""},
		{"skipping verification connects without the CA", plainTLS, "tls: {enabled: true, insecure_skip_verify: true}", ""},
		{"a client certificate from the broker's CA is accepted", mutualTLS,
			"tls: {ca_file: " + caFile + ", cert_file: " + certFile + ", key_file: " + keyFile + "}", ""},
		{"no client certificate is refused", mutualTLS, "tls: {ca_file: " + caFile + "}", "tls: certificate required"},
		// The client offers only a certificate the broker's CA list names,
		// so a stray one is never sent.
		{"a client certificate from another CA is refused", mutualTLS,
			"tls: {ca_file: " + caFile + ", cert_file: " + strayCertFile + ", key_file: " + strayKeyFile + "}", "tls: certificate required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkRefused(t, listBrokers(t, securedConfig(t, tc.broker, tc.settings)), tc.refused)
		})
	}
}

func TestTLSConfigErrorsNameTheSetting(t *testing.T) {
	dir := t.TempDir()
	notPEM := writePEM(t, dir, "ca.txt", []byte("not a certificate"))
	cfg := securedConfig(t, "127.0.0.1:9", "tls: {ca_file: "+notPEM+"}")
	if _, err := ClientOpts(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "tls.ca_file: no PEM certificate in "+notPEM) {
		t.Fatalf("got %v", err)
	}
	cfg = securedConfig(t, "127.0.0.1:9", "tls: {cert_file: "+notPEM+", key_file: "+notPEM+"}")
	if _, err := ClientOpts(cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "tls.cert_file/key_file:") {
		t.Fatalf("got %v", err)
	}
}
