package journal

import (
	"encoding/binary"
	"hash/crc32"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
)

// The log is read by one reader (readSegment), whoever reads it: recovery,
// writable or read-only, the walk that names the buses when the database is
// gone, and tests. It cuts a segment into its whole records and gives one
// verdict on what follows them (judgeTail), under the one rule of SPEC §11:
// a bad record is a torn tail only when nothing valid follows it in the
// newest segment; anything else is corruption.

// A tail is the verdict on what follows a segment's whole records.
type tail uint8

const (
	tailClean   tail = iota // nothing: the segment is zero from there on
	tailTorn                // a write cut short at the end of the log, never acknowledged
	tailCorrupt             // damage, which may have taken acknowledged records with it
)

func (t tail) String() string {
	switch t {
	case tailClean:
		return "clean"
	case tailTorn:
		return "torn"
	}
	return "corrupt"
}

// segmentRead is a log segment cut into its whole records, in order, and
// the verdict on what follows them.
type segmentRead struct {
	data []byte   // the segment, mapped: unmapSegment releases it
	recs []record // its whole records, whose events alias data
	offs []int    // where each record starts
	end  int      // past the last whole record
	tail tail     // what follows end
	err  error    // reading the file; then the rest is empty
}

// readSegment maps the segment at path and reads it; newest says whether
// it is the newest segment of the log, the only one whose end can be torn.
func readSegment(path string, newest bool) segmentRead {
	data, err := mapSegment(path)
	if err != nil {
		return segmentRead{err: err}
	}
	sr := cutRecords(data, newest)
	sr.data = data
	return sr
}

// cutRecords cuts data, a segment, into its whole records and judges what
// follows them.
func cutRecords(data []byte, newest bool) segmentRead {
	var sr segmentRead
	off := 0
	for off < len(data) && !allZero(data[off:min(off+recHeaderLen, len(data))]) {
		rec, n, err := readRecord(data[off:])
		if err != nil {
			break
		}
		sr.recs, sr.offs = append(sr.recs, rec), append(sr.offs, off)
		off += n
	}
	sr.end = off
	sr.tail = judgeTail(data, off, newest)
	return sr
}

// judgeTail judges what follows a segment's whole records, from off on.
// Zeros are the end of the log. A bad record in the newest segment is a
// torn tail when tornAt says so; bytes after a zero header (a record whose
// header never made it) are torn unless a whole record follows them. In any
// older segment, anything but zeros is corruption.
func judgeTail(data []byte, off int, newest bool) tail {
	rest := data[off:]
	switch {
	case allZero(rest):
		return tailClean
	case !newest:
		return tailCorrupt
	case !allZero(rest[:min(recHeaderLen, len(rest))]):
		if tornAt(data, off) {
			return tailTorn
		}
	case !validFollows(rest):
		return tailTorn
	}
	return tailCorrupt
}

// tornAt reports whether the bad record at data[off:], in the newest
// segment, is a torn tail: a write cut short, which was never
// acknowledged. Anything else is corruption, which may have taken
// acknowledged events with it. It is torn only when no whole record
// follows it, its payload is not whole under a damaged length, and it does
// not look complete: a record that fits in the segment and whose last two
// bytes are not zero (segments are zero past the end of the log, and an
// event record ends with its envelope's closing brace). So no single
// damaged byte of a record that was written whole passes for a torn one.
func tornAt(data []byte, off int) bool {
	rest := data[off:]
	if validFollows(rest[1:]) || intactUnderOtherLength(rest) {
		return false
	}
	if len(rest) < recHeaderLen {
		return true
	}
	n := uint64(binary.BigEndian.Uint32(rest))
	if n < payloadHeadLen || n > maxRecordLen || n > uint64(len(rest)-recHeaderLen) {
		return true
	}
	end := recHeaderLen + int(n)
	return rest[end-1] == 0 && rest[end-2] == 0
}

// validFollows reports whether a whole, intact record starts anywhere in p.
func validFollows(p []byte) bool {
	for i := 0; i+recHeaderLen+payloadHeadLen <= len(p); i++ {
		if p[i] > maxRecordLen>>24 {
			continue // a length over maxRecordLen: the common case, skipped fast
		}
		if _, _, err := readRecord(p[i:]); err == nil {
			return true
		}
	}
	return false
}

// intactUnderOtherLength reports whether the record at the start of p has a
// whole payload that matches its checksum under some length other than the
// one its header says: a record written whole whose length was damaged.
func intactUnderOtherLength(p []byte) bool {
	if len(p) < recHeaderLen+payloadHeadLen {
		return false
	}
	want := binary.BigEndian.Uint32(p[4:])
	payload := p[recHeaderLen:min(len(p), recHeaderLen+maxRecordLen)]
	sum := crc32.Update(0, castagnoli, payload[:payloadHeadLen-1])
	for n := payloadHeadLen; n <= len(payload); n++ {
		sum = crc32.Update(sum, castagnoli, payload[n-1:n])
		if sum == want {
			if _, err := decodePayload(payload[:n], true); err == nil {
				return true
			}
		}
	}
	return false
}

func allZero(p []byte) bool {
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// readSegments reads the segments seqs of dir, the whole log, on a few
// goroutines, each as far ahead as it gets: reading and checking the
// records is most of a replay's work, and it does not depend on the order.
// The i-th channel gets the i-th segment. stop makes them skip the rest
// and waits for them.
func readSegments(dir string, seqs []uint64) (out []chan segmentRead, stop func()) {
	out = make([]chan segmentRead, len(seqs))
	for i := range out {
		out[i] = make(chan segmentRead, 1)
	}
	var (
		next    atomic.Int64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	for range min(runtime.GOMAXPROCS(0), 4, len(seqs)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(seqs); i = int(next.Add(1) - 1) {
				if stopped.Load() {
					out[i] <- segmentRead{}
					continue
				}
				out[i] <- readSegment(filepath.Join(dir, segmentName(seqs[i])), i == len(seqs)-1)
			}
		})
	}
	return out, func() {
		stopped.Store(true)
		wg.Wait()
		// The segments no one took: mapped for nothing.
		for _, c := range out {
			select {
			case ps := <-c:
				unmapSegment(ps.data)
			default:
			}
		}
	}
}
