package route

import "testing"

func TestValidHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"", true},
		{"example.com", true},
		{"Example.COM:8080", true},
		{"a", true},
		{"127.0.0.1", true},
		{"127.0.0.1:80", true},
		{"xn--bcher-kva.example", true},
		{"ex%41mple.com", true},
		{"a_b~c!$&'()*+,;=.test", true},
		{"[::1]", true},
		{"[::1]:443", true},
		{"[2001:db8::1]", true},
		{"[2001:db8:0:0:0:0:0:1]:8080", true},
		{"[::ffff:192.0.2.1]", true},
		{"[v1.fe80::a+en1]", true},
		{"a:0", true},
		{"a:65535", true},
		// Userinfo: RFC 9112 §3.2 has none in Host.
		{"a.test@evil.test", false},
		{"user:pw@evil.test", false},
		{"@evil.test", false},
		// Spaces, controls and delimiters no name holds.
		{"a b", false},
		{"a\tb", false},
		{"a\x00b", false},
		{"a\x7f", false},
		{"a/b", false},
		{"a?b", false},
		{"a#b", false},
		{"a\\b", false},
		{"a\"b", false},
		{"é.test", false},
		{"%zz.test", false},
		{"a%4", false},
		// Ports that are no number.
		{"a:", false},
		{"a:http", false},
		{"a:65536", false},
		{"a:123456", false},
		{"a:-1", false},
		{"a:80:80", false},
		{":80", false},
		// IP literals.
		{"[::1", false},
		{"::1", false},
		{"[::1]x", false},
		{"[::1]:", false},
		{"[fe80::1%25eth0]", false},
		{"[1:2:3:4:5:6:7:8:9]", false},
		{"[1::2::3]", false},
		{"[12345::]", false},
		{"[::1.2.3]", false},
		{"[::256.1.1.1]", false},
		{"[::01.1.1.1]", false},
		{"[]", false},
		{"[v1.]", false},
		{"[v.a]", false},
	} {
		if got := ValidHost(tc.host); got != tc.ok {
			t.Errorf("ValidHost(%q) = %v, want %v", tc.host, got, tc.ok)
		}
		if got := ValidHost([]byte(tc.host)); got != tc.ok {
			t.Errorf("ValidHost([]byte(%q)) = %v, want %v", tc.host, got, tc.ok)
		}
	}
}

func TestValidHostAllocs(t *testing.T) {
	host := []byte("www.example.com:8080")
	if n := testing.AllocsPerRun(100, func() { ValidHost(host) }); n != 0 {
		t.Fatalf("ValidHost allocates %v times", n)
	}
}
