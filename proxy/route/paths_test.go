package route

import (
	"testing"

	"github.com/ebb-proxy/ebb/config"
	"github.com/ebb-proxy/ebb/proxy/paths"
)

// TestPathOptions: a listener's paths block, as its table carries it.
func TestPathOptions(t *testing.T) {
	for _, tc := range []struct {
		in   config.Paths
		want paths.Options
	}{
		{config.Paths{EscapedSlashes: config.EscapedSlashesKeep}, paths.Options{}},
		{config.Paths{Normalize: true, EscapedSlashes: config.EscapedSlashesReject}, paths.Options{Normalize: true, EscapedSlashes: paths.RejectEscaped}},
		{config.Paths{MergeSlashes: true, EscapedSlashes: config.EscapedSlashesDecode}, paths.Options{MergeSlashes: true, EscapedSlashes: paths.DecodeEscaped}},
	} {
		if got := pathOptions(tc.in); got != tc.want {
			t.Errorf("pathOptions(%+v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
