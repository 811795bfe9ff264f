package e2e

import (
	"crypto/x509"
	"testing"

	"github.com/ebb-proxy/ebb/proxy/proxytest"
)

// writeTestCert writes a test certificate and key: see
// proxytest.WriteTestCert.
func writeTestCert(t *testing.T, dir string, hosts ...string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	return proxytest.WriteTestCert(t, dir, hosts...)
}
