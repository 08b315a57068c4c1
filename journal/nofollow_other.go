//go:build !unix

package journal

const oNoFollow = 0
