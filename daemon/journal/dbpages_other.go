//go:build unix && !linux

package journal

// releaseDBPages does nothing on this system; see the Linux version.
func (j *Journal) releaseDBPages() {}
