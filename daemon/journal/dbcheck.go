package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// checkDBFile checks the structure of the bbolt database at path before
// bbolt opens it: bbolt trusts its pages, so a damaged one can make it
// panic, fault on a page past the end of a truncated file, or recurse
// without end on a page that refers to itself. The check reads the file
// through a mapping of its own, with faults turned into panics, and walks
// every page bbolt would reach from the newest valid meta page: each
// within the file, reached once, of the right kind, its elements within
// it and its keys in order, and the freelist's pages free and in range.
// A file that passes can be opened and read by bbolt without any of that.
// It does not check values: the journal checks those itself.
func checkDBFile(path string) (err error) {
	f, err := openRegular(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	// Not while another process writes it: bbolt holds an exclusive lock.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return errLockHeld
		}
		return err
	}
	if fi.Size() == 0 {
		return errors.New("empty file")
	}
	if fi.Size() > 1<<40 {
		return fmt.Errorf("%d bytes: too large to be a journal", fi.Size())
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(data)
	return guard(func() error { return checkDB(data) })
}

// guard runs fn, turning a panic, and a memory fault (a mapped file cut
// short under the reader), into an error: damaged data must not stop the
// daemon.
func guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errDamaged, r)
		}
	}()
	return fn()
}

// errLockHeld is checkDBFile's error when another process holds the
// database.
var errLockHeld = errors.New("locked")

// errDamaged wraps a failure to read the database caused by its contents.
var errDamaged = errors.New("damaged database")

// The layout of bbolt's pages (go.etcd.io/bbolt/internal/common), in the
// machine's byte order.
const (
	bbPageHeader   = 16 // id (8), flags (2), count (2), overflow (4)
	bbElement      = 16 // branch: pos, ksize (4 each), pgid (8); leaf: flags, pos, ksize, vsize (4 each)
	bbBranch       = 0x01
	bbLeaf         = 0x02
	bbMeta         = 0x04
	bbFreelist     = 0x10
	bbBucketLeaf   = 0x01
	bbMagic        = 0xED0CDAED
	bbVersion      = 2
	bbMetaLen      = 64 // magic, version, pageSize, flags (4 each), root (16), freelist, pgid, txid, checksum (8 each)
	bbNoFreelist   = ^uint64(0)
	bbBucketHeader = 16 // root (8), sequence (8)
	bbMaxDepth     = 64
)

var ne = binary.NativeEndian

type bbMetaPage struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

// readMeta reads and validates the meta page at off, as bbolt does.
func readMeta(data []byte, off int) (bbMetaPage, bool) {
	if off < 0 || off+bbPageHeader+bbMetaLen > len(data) {
		return bbMetaPage{}, false
	}
	p := data[off+bbPageHeader : off+bbPageHeader+bbMetaLen]
	h := fnv.New64a()
	h.Write(p[:56])
	if ne.Uint32(p) != bbMagic || ne.Uint32(p[4:]) != bbVersion || ne.Uint64(p[56:]) != h.Sum64() {
		return bbMetaPage{}, false
	}
	return bbMetaPage{pageSize: ne.Uint32(p[8:]), root: ne.Uint64(p[16:]), freelist: ne.Uint64(p[32:]),
		pgid: ne.Uint64(p[40:]), txid: ne.Uint64(p[48:])}, true
}

type dbWalk struct {
	data     []byte
	ps       uint64
	hwm      uint64
	reached  map[uint64]bool
	freed    map[uint64]bool
	reachedN int
}

func checkDB(data []byte) error {
	// The page size, as bbolt finds it: in the first meta page, else in
	// the second at the default page size.
	m0, ok0 := readMeta(data, 0)
	ps := uint64(m0.pageSize)
	if !ok0 {
		m1, ok1 := readMeta(data, os.Getpagesize())
		if !ok1 {
			return errors.New("no valid meta page")
		}
		ps = uint64(m1.pageSize)
	}
	if ps < 1024 || ps > 1<<16 || ps&(ps-1) != 0 {
		return fmt.Errorf("page size %d", ps)
	}
	if uint64(len(data)) < 2*ps {
		return fmt.Errorf("file of %d bytes, smaller than two pages", len(data))
	}
	m0, ok0 = readMeta(data, 0)
	m1, ok1 := readMeta(data, int(ps))
	// bbolt uses the meta page with the higher transaction id that is
	// valid.
	m, ok := m0, ok0
	if !ok0 || (ok1 && m1.txid > m0.txid) {
		m, ok = m1, ok1
	}
	if !ok {
		return errors.New("no valid meta page")
	}
	if m.pageSize != uint32(ps) {
		return fmt.Errorf("meta pages disagree on the page size: %d, %d", ps, m.pageSize)
	}
	if m.pgid < 3 || m.pgid > uint64(len(data))/ps {
		return fmt.Errorf("high water mark %d pages beyond the file's %d", m.pgid, uint64(len(data))/ps)
	}
	w := &dbWalk{data: data, ps: ps, hwm: m.pgid, reached: map[uint64]bool{0: true, 1: true}, freed: map[uint64]bool{}}
	if m.freelist == bbNoFreelist {
		// bbolt would rebuild it walking the tree in a goroutine that
		// panics on any inconsistency; the journal always syncs it.
		return errors.New("no freelist")
	}
	if err := w.freelist(m.freelist); err != nil {
		return err
	}
	return w.tree(m.root, 0)
}

// page returns page id with its overflow, marked reached.
func (w *dbWalk) page(id uint64, flags uint16) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page %d out of range [2, %d)", id, w.hwm)
	}
	head := w.data[id*w.ps : id*w.ps+bbPageHeader]
	if got := ne.Uint64(head); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	if f := ne.Uint16(head[8:]); f&flags == 0 || f&^(bbBranch|bbLeaf|bbMeta|bbFreelist) != 0 {
		return nil, fmt.Errorf("page %d: flags %#x", id, f)
	}
	over := uint64(ne.Uint32(head[12:]))
	if over >= w.hwm-id {
		return nil, fmt.Errorf("page %d: %d overflow pages past the high water mark", id, over)
	}
	for i := id; i <= id+over; i++ {
		if w.reached[i] {
			return nil, fmt.Errorf("page %d reached twice", i)
		}
		if w.freed[i] {
			return nil, fmt.Errorf("page %d reached and free", i)
		}
		w.reached[i] = true
	}
	return w.data[id*w.ps : (id+over+1)*w.ps], nil
}

func (w *dbWalk) freelist(id uint64) error {
	p, err := w.page(id, bbFreelist)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if ne.Uint16(p[8:]) != bbFreelist {
		return fmt.Errorf("freelist page %d: flags %#x", id, ne.Uint16(p[8:]))
	}
	count, at := uint64(ne.Uint16(p[10:])), uint64(bbPageHeader)
	if count == 0xFFFF {
		count, at = ne.Uint64(p[bbPageHeader:]), bbPageHeader+8
	}
	if count > (uint64(len(p))-at)/8 {
		return fmt.Errorf("freelist of %d pages does not fit in its page", count)
	}
	for i := range count {
		free := ne.Uint64(p[at+8*i:])
		if free < 2 || free >= w.hwm || w.freed[free] || w.reached[free] {
			return fmt.Errorf("freelist: page %d", free)
		}
		w.freed[free] = true
	}
	return nil
}

// tree checks the B+tree whose root is page id, and the buckets in it.
func (w *dbWalk) tree(id uint64, depth int) error {
	if depth > bbMaxDepth {
		return errors.New("tree too deep")
	}
	p, err := w.page(id, bbBranch|bbLeaf)
	if err != nil {
		return err
	}
	flags := ne.Uint16(p[8:])
	if flags != bbBranch && flags != bbLeaf {
		return fmt.Errorf("page %d: flags %#x", id, flags)
	}
	if flags == bbLeaf {
		return w.leaf(p, depth, fmt.Sprintf("page %d", id))
	}
	count := int(ne.Uint16(p[10:]))
	if count == 0 || bbPageHeader+count*bbElement > len(p) {
		return fmt.Errorf("branch page %d: %d elements", id, count)
	}
	var prev []byte
	for i := range count {
		e := bbPageHeader + i*bbElement
		k, ok := within(p, e, ne.Uint32(p[e:]), ne.Uint32(p[e+4:]))
		if !ok || (i > 0 && bytes.Compare(prev, k) >= 0) {
			return fmt.Errorf("branch page %d: element %d", id, i)
		}
		prev = k
		if err := w.tree(ne.Uint64(p[e+8:]), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// leaf checks a leaf page (or an inline bucket's page) and the buckets
// it holds.
func (w *dbWalk) leaf(p []byte, depth int, name string) error {
	count := int(ne.Uint16(p[10:]))
	if bbPageHeader+count*bbElement > len(p) {
		return fmt.Errorf("leaf %s: %d elements", name, count)
	}
	var prev []byte
	for i := range count {
		e := bbPageHeader + i*bbElement
		ksize, vsize := ne.Uint32(p[e+8:]), ne.Uint32(p[e+12:])
		kv, ok := within(p, e, ne.Uint32(p[e+4:]), uint32(min(uint64(ksize)+uint64(vsize), 1<<32-1)))
		if !ok || uint64(len(kv)) != uint64(ksize)+uint64(vsize) {
			return fmt.Errorf("leaf %s: element %d out of its page", name, i)
		}
		k, v := kv[:ksize], kv[ksize:]
		if i > 0 && bytes.Compare(prev, k) >= 0 {
			return fmt.Errorf("leaf %s: keys out of order at element %d", name, i)
		}
		prev = k
		if ne.Uint32(p[e:])&bbBucketLeaf == 0 {
			continue
		}
		if depth < 0 {
			return fmt.Errorf("leaf %s: a bucket inside an inline bucket", name)
		}
		if len(v) < bbBucketHeader {
			return fmt.Errorf("leaf %s: bucket %q of %d bytes", name, k, len(v))
		}
		if root := ne.Uint64(v); root != 0 {
			if err := w.tree(root, depth+1); err != nil {
				return err
			}
			continue
		}
		inline := v[bbBucketHeader:]
		if len(inline) < bbPageHeader || ne.Uint16(inline[8:]) != bbLeaf {
			return fmt.Errorf("leaf %s: inline bucket %q", name, k)
		}
		if err := w.leaf(inline, -1, fmt.Sprintf("inline bucket %q", k)); err != nil {
			return err
		}
	}
	return nil
}

// within returns p[e+pos : e+pos+n] if it lies within p.
func within(p []byte, e int, pos, n uint32) ([]byte, bool) {
	start := uint64(e) + uint64(pos)
	end := start + uint64(n)
	if end > uint64(len(p)) {
		return nil, false
	}
	return p[start:end], true
}
