package journal

import (
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// The database records the format it is written in (bucket meta, key
// format: a decimal number). A change to what the journal stores that an
// older daemon would misread is a new format: it appends to upgrades the
// step from the previous one, and ships with a test that opens a state dir
// the previous format wrote (testdata/format-N.tar.gz, opened by
// TestStateDirsOfEveryFormatOpen). A change an older daemon reads correctly
// (a new optional field of a bus's settings, say) needs none.
//
// A state dir of an older format is upgraded in place when it is opened,
// in the transaction that records the new format, and the upgrade is
// logged; one of a newer format is refused with a *FormatError before
// anything in it is touched (SPEC §11).

// upgrades[i] upgrades a database of format i+1 to format i+2, within the
// transaction of the upgrade. A variable for tests.
var upgrades = []func(tx *bolt.Tx) error{
	upgradeTo2, // format 2: consumers (consumer.go)
	upgradeTo3, // format 3: keys with their events, replies as values (keys_upgrade.go)
}

// formatVersion is the format this daemon reads and writes.
func formatVersion() int { return 1 + len(upgrades) }

// A FormatError is Open's error for a state dir written in a format newer
// than this daemon's. Nothing in the directory was changed.
type FormatError struct {
	Dir    string // the journal's directory
	Stored int    // the format the directory was written in
	Known  int    // the newest format this daemon knows
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("journal: %s is in format %d, newer than format %d, the newest this daemon knows; refusing to open it (nothing in it was changed)",
		e.Dir, e.Stored, e.Known)
}

// parseFormat reads a stored format. None is format 1, the first; anything
// but a positive decimal number is damage.
func parseFormat(v []byte) (int, error) {
	if v == nil {
		return 1, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 1 || strconv.Itoa(n) != string(v) {
		return 0, fmt.Errorf("journal: %w: format %q", errDamaged, v)
	}
	return n, nil
}

// upgrade brings the database from format from up to the current one, in
// one transaction, and logs it.
func (j *Journal) upgrade(from int) error {
	to := formatVersion()
	err := j.db.Update(func(tx *bolt.Tx) error {
		for f := from; f < to; f++ {
			if err := upgrades[f-1](tx); err != nil {
				return fmt.Errorf("from format %d to %d: %w", f, f+1, err)
			}
		}
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(to)))
	})
	if err != nil {
		return fmt.Errorf("journal: upgrading %s: %w", j.dir, classify(err))
	}
	j.logger.Info("journal: upgraded the state dir in place", "dir", j.dir, "from", from, "to", to)
	return nil
}
