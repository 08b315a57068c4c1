//go:build !linux

package journaldtest

import "errors"

func payload(data, oob []byte) ([]byte, bool, error) {
	if len(oob) > 0 {
		return nil, false, errors.New("descriptors are decoded on Linux only")
	}
	return data, false, nil
}

const msgTrunc = 0x10
