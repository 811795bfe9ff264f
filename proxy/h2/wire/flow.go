// What both sides' flow control and settings share (RFC 9113 §6.5, §6.9).

package wire

import (
	"errors"

	"golang.org/x/net/http2"
)

// MaxWindow is the largest flow-control window (RFC 9113 §6.9.1): a
// WINDOW_UPDATE or a SETTINGS_INITIAL_WINDOW_SIZE change that takes a
// send window beyond it is a FLOW_CONTROL_ERROR.
const MaxWindow = 1<<31 - 1

// SettingsErrCode is the code of the connection error a SETTINGS frame
// makes when http2.SettingsFrame.ForeachSetting, with each setting's
// Valid, returned err: the setting's own, or PROTOCOL_ERROR.
func SettingsErrCode(err error) http2.ErrCode {
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		return http2.ErrCode(ce)
	}
	return http2.ErrCodeProtocol
}
