package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// An empty state dir on a full disk. When the journal's directory holds no
// journal file and there is no room to create the database (nor, perhaps,
// the directory), there is nothing to restore and nothing that could be
// lost: Open succeeds read-only with no database (noDB), no bus but the
// global bus, in memory on a new epoch, and every append, new session and
// key refused with ErrDiskFull, as for a journal read-only with what it
// restored (readonly.go). The first attempt after space returns
// (tryWritable) creates the directory and the database, and persist
// writes the global bus's settings as for any bus put on a new epoch.
// Refusing to start instead would make a service manager restart the
// daemon in a loop until an operator made room.

// startsEmpty reports whether err, from preparing the directory or
// recovering it, is a lack of space in a state dir that holds nothing.
func (j *Journal) startsEmpty(err error) bool {
	if !errors.Is(err, ErrDiskFull) && !errors.Is(classify(err), ErrDiskFull) {
		return false
	}
	ents, rerr := os.ReadDir(j.dir)
	if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return false
	}
	for _, e := range ents {
		if n := e.Name(); n == dbName || (strings.HasPrefix(n, "wal-") && strings.HasSuffix(n, ".log")) {
			return false
		}
	}
	return true
}

// enterEmpty makes j read-only with no database; cause is why it could
// not create one.
func (j *Journal) enterEmpty(cause error) {
	if j.db != nil {
		j.db.Close()
		j.db = nil
	}
	os.Remove(filepath.Join(j.dir, dbName)) // a partial one, if anything
	j.noDB.Store(true)
	j.enterReadOnly(emptyRecovery(), cause)
}

// emptyRecovery is the recovery of a state dir that holds nothing.
func emptyRecovery() *recovery {
	return &recovery{
		metas: map[uint64]*busMeta{}, dbLast: map[uint64]uint64{}, drop: map[uint64]uint64{}, newEpoch: map[uint64]bool{},
		lr: &logReplay{nextSeq: 1, segs: map[uint64][]segLast{}, pend: map[uint64][]pendRec{}},
	}
}

// createDBLocked creates the directory and the database of a journal
// started with none, and adds every bus opened meanwhile (the global bus)
// to rc as put on a new epoch, for persist to write. On failure the
// journal stays as it was. j.mu and j.roMu must be held.
func (j *Journal) createDBLocked(rc *recovery) error {
	if err := PrepareDir(j.dir); err != nil {
		return classify(err)
	}
	path := filepath.Join(j.dir, dbName)
	db, err := openBolt(path)
	if err != nil {
		os.Remove(path)
		return classify(err)
	}
	j.db = db
	for num, m := range j.metas {
		rc.metas[num] = m
		rc.newEpoch[num] = true
	}
	j.noDB.Store(false)
	return nil
}

// errNoDB is what the database's writers return while the journal has
// none (noDB); its readers find nothing stored.
var errNoDB = fmt.Errorf("%w: no room to create the journal's database; read-only until space returns", ErrDiskFull)
