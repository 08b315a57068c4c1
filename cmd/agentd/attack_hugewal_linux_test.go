package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// Issue 33: alice grows her live -wal to a sparse 200 GB and unlinks it
// under her writer. The incident's capture keeps the frames anyone reads
// and stops there (recovery/capture_walend.go): it is written within
// seconds, where hashing 200 GB of zeros took minutes with the writer
// frozen (and, under systemd, the watchdog restarting agentd into the
// same capture, in a loop).
func TestAttackHugeSparseWALCapturedQuickly(t *testing.T) {
	alice := attackUser(t, "sgsec4-h1-alice")
	r := attackRig(t, alice, "")
	db := ownedStore(t, r, alice)
	ackDir := filepath.Join(filepath.Dir(r.home), "ack")
	if err := os.Mkdir(ackDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ackDir, int(alice.Uid), int(alice.Gid)); err != nil {
		t.Fatal(err)
	}
	p := r.start(t)
	p.waitLog(t, 30*time.Second, `"event":"agent.started"`)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 50, Credential: alice, Ack: filepath.Join(ackDir, "ack")})
	w.AcksGrow(t, 5)
	p.waitLog(t, 30*time.Second, `"event":"guard.armed"`, db)

	asUser(t, alice, `truncate -s 200G "$1-wal" && rm "$1-wal" "$1-shm"`, db)
	p.waitLog(t, 30*time.Second, `"event":"incident.opened"`, db)
	start := time.Now()
	expectLog(t, p, 60*time.Second, `"event":"capture.written"`, db)
	t.Logf("capture.written %v after incident.opened was seen", time.Since(start))
	stopWithin(t, p, agentdCloseTimeout)
}
