package route

// ValidHost reports whether host, a request's Host field or :authority,
// is a host as RFC 9112 §3.2 and RFC 3986 §3.2.2 define it, with an
// optional numeric port: a registered name (letters, digits, "-._~", the
// sub-delimiters and percent-encoded octets), an IPv4 address (which is
// such a name), or an IP literal in brackets. Userinfo ("user@host"),
// spaces, controls and anything else a name cannot hold make it invalid:
// routing on such a value would route on what a lenient origin may read
// differently ("a.test@evil.test" is evil.test to a URL parser). The empty
// host (an HTTP/1.0 request without Host) is valid: it matches the routes
// that name none.
func ValidHost[S string | []byte](host S) bool {
	if len(host) == 0 {
		return true
	}
	name := host
	if host[0] == '[' {
		end := -1
		for i := 1; i < len(host); i++ {
			if host[i] == ']' {
				end = i
				break
			}
		}
		if end < 0 || !validIPLiteral(host[1:end]) {
			return false
		}
		name, host = host[:0], host[end+1:]
		if len(host) == 0 {
			return true
		}
		if host[0] != ':' {
			return false
		}
		return validPort(host[1:])
	}
	for i := range len(host) {
		if host[i] == ':' {
			name = host[:i]
			if !validPort(host[i+1:]) {
				return false
			}
			break
		}
	}
	return validRegName(name)
}

// validRegName reports whether s is a non-empty reg-name (RFC 3986
// §3.2.2): unreserved characters, sub-delimiters and percent-encoded
// octets.
func validRegName[S string | []byte](s S) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return false
			}
			i += 2
		case c >= 0x80 || !regNameChar[c]:
			return false
		}
	}
	return true
}

// validPort reports whether s is a port: one to five digits, at most
// 65535. RFC 3986 lets a port be empty; HTTP has no use for "host:", and
// such a value is more likely a probe than a client.
func validPort[S string | []byte](s S) bool {
	if len(s) == 0 || len(s) > 5 {
		return false
	}
	n := 0
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}

// validIPLiteral reports whether s, what stands between the brackets of
// an IP literal, is an IPv6 address or an IPvFuture (RFC 3986 §3.2.2).
// Zone identifiers (RFC 6874) are refused: they name an interface of the
// client's host, which means nothing to ebb or to an origin.
func validIPLiteral[S string | []byte](s S) bool {
	if len(s) > 1 && (s[0] == 'v' || s[0] == 'V') {
		dot := -1
		for i := 1; i < len(s); i++ {
			if s[i] == '.' {
				dot = i
				break
			}
			if !isHex(s[i]) {
				return false
			}
		}
		if dot < 2 || dot == len(s)-1 {
			return false
		}
		for i := dot + 1; i < len(s); i++ {
			if c := s[i]; c >= 0x80 || !(regNameChar[c] || c == ':') {
				return false
			}
		}
		return true
	}
	return validIPv6(s)
}

// validIPv6 reports whether s is an IPv6 address in text (RFC 4291
// §2.2): eight groups of one to four hex digits, one run of which may be
// "::", the last two of which may be an IPv4 address.
func validIPv6[S string | []byte](s S) bool {
	groups, elided := 0, false
	i := 0
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		elided, i = true, 2
		if i == len(s) {
			return true
		}
	}
	for i < len(s) {
		// One group, or a trailing IPv4 address.
		j := i
		for j < len(s) && isHex(s[j]) {
			j++
		}
		if j < len(s) && s[j] == '.' {
			if !validIPv4(s[i:]) {
				return false
			}
			groups += 2
			i = len(s)
			break
		}
		if j == i || j-i > 4 {
			return false
		}
		groups++
		i = j
		if i == len(s) {
			break
		}
		if s[i] != ':' {
			return false
		}
		i++
		if i < len(s) && s[i] == ':' {
			if elided {
				return false
			}
			elided = true
			i++
			if i == len(s) {
				break
			}
		} else if i == len(s) {
			return false // a trailing single colon
		}
	}
	if elided {
		return groups < 8
	}
	return groups == 8
}

// validIPv4 reports whether s is a dotted-decimal IPv4 address without
// leading zeros.
func validIPv4[S string | []byte](s S) bool {
	parts, n, digits := 0, 0, 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if digits == 0 || n > 255 {
				return false
			}
			parts++
			n, digits = 0, 0
			continue
		}
		c := s[i]
		if c < '0' || c > '9' || (digits == 1 && n == 0) {
			return false
		}
		n, digits = n*10+int(c-'0'), digits+1
	}
	return parts == 4
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// regNameChar marks the characters of a reg-name other than '%':
// unreserved and sub-delims (RFC 3986 §2.2, §2.3).
var regNameChar = func() (t [128]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~!$&'()*+,;=" {
		t[c] = true
	}
	return t
}()
