package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"
)

// A Source says where a configuration comes from: a file, and values set
// over it by serve flags and environment variables. LoadConfig reads one; a
// running daemon keeps the Source it started from and reads it again on
// every reload, so a reload sees the file as it is now under the flags and
// variables the daemon was started with. Neither changes a Source's maps;
// do not change them while a daemon runs from it.
type Source struct {
	// File is the configuration file; "" means DefaultConfigPath().
	File string
	// FileExplicit reports that the user named File (with --config): then
	// an absent file is an error naming it, since a typo in the path should
	// not silently start a daemon on defaults. An absent default file means
	// all defaults.
	FileExplicit bool
	// Set holds the values set by serve flags, by key ("ring_size": "200"),
	// written as the flags take them: durations "15s", modes "0660",
	// booleans "true" or "false", lists comma-separated. They win over the
	// file; an error in one names its flag ("--ring-size").
	Set map[string]string
	// Env holds environment variables by name, as read at start. The value
	// of a setting's Env variable, when not empty, sets the setting if Set
	// does not, and wins over the file; an error in it names the variable
	// ("$LOCALBUS_SOCKET").
	Env map[string]string
}

// LoadConfig reads the configuration of src: the file over Defaults, then
// the environment variables and the set values over the file, and validates
// the result.
//
// The file is strict: an unknown key, a value of the wrong type and a value
// out of range are each a *ConfigError naming the key; all of them are
// reported at once, joined, with those of the set values and environment
// variables. Relative socket, keys_file and state_dir values are taken
// relative to the file's directory. If the file does not set keys_file, it
// is keys.json beside the file.
//
// On error the returned Config is the zero value.
func LoadConfig(src Source) (Config, error) {
	l, err := loadFile(src.File, src.FileExplicit)
	if err != nil {
		return Config{}, err
	}
	l.applySet(src.Set, src.Env)
	return l.finish()
}

// loader builds a Config from defaults, a file and flags, remembering where
// each value came from so errors can name it.
type loader struct {
	cfg  Config
	errs []error
	// from maps a key to the file or flag that set it.
	from map[string]valueSource
}

// valueSource is where a value came from: a file or a flag.
type valueSource struct{ file, flag string }

// loadFile returns a loader holding the file at path over the defaults. Key
// errors are kept in the loader; the error returned is one that stops
// loading (the file cannot be read or is not TOML).
func loadFile(path string, explicit bool) (*loader, error) {
	if path == "" {
		path, explicit = DefaultConfigPath(), false
	}
	l := &loader{cfg: Defaults(), from: make(map[string]valueSource)}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	l.cfg.KeysFile = keysFileBeside(abs)

	data, err := readConfigFile(path)
	if errors.Is(err, fs.ErrNotExist) && !explicit {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := l.decode(path, filepath.Dir(abs), string(data)); err != nil {
		return nil, err
	}
	return l, nil
}

// fileType is a struct with one toml.Primitive field per setting. Decoding
// into it leaves unknown keys undecoded, so MetaData.Undecoded names them.
var fileType = sync.OnceValue(func() reflect.Type {
	fields := make([]reflect.StructField, len(settings)+1)
	for i, s := range settings {
		fields[i] = reflect.StructField{
			Name: "F" + strconv.Itoa(i),
			Type: reflect.TypeFor[toml.Primitive](),
			Tag:  reflect.StructTag(`toml:"` + s.Key + `"`),
		}
	}
	fields[len(settings)] = reflect.StructField{
		Name: "Upstream",
		Type: reflect.TypeFor[toml.Primitive](),
		Tag:  reflect.StructTag(`toml:"` + upstreamKey + `"`),
	}
	return reflect.StructOf(fields)
})

// decode applies the TOML document data, read from path, over l.cfg.
func (l *loader) decode(path, dir, data string) error {
	doc := reflect.New(fileType())
	md, err := toml.Decode(data, doc.Interface())
	if err != nil {
		var perr toml.ParseError
		if errors.As(err, &perr) {
			return fmt.Errorf("config: %s: %w%s", path, err, syntaxHint(data, perr))
		}
		return fmt.Errorf("config: %s: %w", path, err)
	}

	// Undecoded names the keys that match no field. The decoder also matches
	// fields case-insensitively, so a key that differs from a known one only
	// in case is caught by the exact lookup below.
	reported := make(map[string]bool)
	unknown := func(key string) {
		if reported[key] {
			return
		}
		reported[key] = true
		l.errs = append(l.errs, &ConfigError{Key: key, Msg: "unknown key" + suggest(key), File: path})
	}
	for _, k := range md.Undecoded() {
		if _, ok := lookupSetting(k[0]); !ok && k[0] != upstreamKey {
			unknown(k[0])
		}
	}
	for _, k := range md.Keys() {
		if _, ok := lookupSetting(k[0]); !ok && k[0] != upstreamKey {
			unknown(k[0])
		}
	}
	if md.IsDefined(upstreamKey) {
		l.decodeUpstream(path, dir, md, doc.Elem().Field(len(settings)).Interface().(toml.Primitive))
	}

	for i, s := range settings {
		if !md.IsDefined(s.Key) {
			continue
		}
		var v any
		if err := md.PrimitiveDecode(doc.Elem().Field(i).Interface().(toml.Primitive), &v); err != nil {
			l.errs = append(l.errs, &ConfigError{Key: s.Key, Msg: err.Error(), File: path})
			continue
		}
		ptr := s.field(&l.cfg)
		if msg := setTOML(ptr, v); msg != "" {
			l.errs = append(l.errs, &ConfigError{Key: s.Key, Msg: msg, File: path})
			continue
		}
		if p, ok := ptr.(*string); ok && s.Path && *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
		l.from[s.Key] = valueSource{file: path}
	}
	return nil
}

// applySet applies the values of set and env (see Source) over l.cfg, in
// the order of the settings table.
func (l *loader) applySet(set, env map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if _, ok := lookupSetting(k); !ok {
			l.errs = append(l.errs, &ConfigError{Key: k, Msg: "unknown key" + suggest(k), Flag: "--" + Setting{Key: k}.Flag()})
		}
	}
	for _, s := range settings {
		if v, ok := set[s.Key]; ok {
			l.applyString(s, v, "--"+s.Flag())
		} else if v := env[s.Env]; s.Env != "" && v != "" {
			l.applyString(s, v, "$"+s.Env)
		}
	}
}

// applyString sets the value of s from v, which came from flag (a flag or
// an environment variable).
func (l *loader) applyString(s Setting, v, flag string) {
	if msg := setString(s.field(&l.cfg), v); msg != "" {
		l.errs = append(l.errs, &ConfigError{Key: s.Key, Msg: msg, Flag: flag})
		return
	}
	l.from[s.Key] = valueSource{flag: flag}
}

// finish validates the loaded configuration and returns it, or every error
// found while loading and validating it.
func (l *loader) finish() (Config, error) {
	errs := l.errs
	for _, e := range l.cfg.problems() {
		from := l.from[e.Key]
		e.File, e.Flag = from.file, from.flag
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return Config{}, joinErrors(errs)
	}
	return l.cfg, nil
}

// joinErrors is errors.Join that returns a single error as itself.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// syntaxHint returns advice for a TOML syntax error on a mode or duration:
// those are strings, and the unquoted forms people write (0660, 15s) are not
// TOML.
func syntaxHint(data string, perr toml.ParseError) string {
	key := perr.LastKey
	if key == "" {
		// The parser names no key when the value ends early, as in
		// "keepalive = 15s"; take it from the start of the line.
		lines := strings.Split(data, "\n")
		if n := perr.Position.Line; n >= 1 && n <= len(lines) {
			before, _, _ := strings.Cut(lines[n-1], "=")
			key = strings.TrimSpace(before)
		}
	}
	s, ok := lookupSetting(key)
	if !ok {
		return ""
	}
	switch s.field(&Config{}).(type) {
	case *os.FileMode:
		return fmt.Sprintf(`; write %s as a string, e.g. %s = "0660"`, key, key)
	case *time.Duration:
		return fmt.Sprintf(`; write %s as a string, e.g. %s = "15s"`, key, key)
	}
	return ""
}

// suggest returns a hint naming the known key closest to an unknown one, or
// "" if none is close.
func suggest(key string) string {
	best, bestDist := "", 3 // suggest only within two edits
	for _, s := range settings {
		d := editDistance(strings.ToLower(strings.ReplaceAll(key, "-", "_")), s.Key)
		if d < bestDist {
			best, bestDist = s.Key, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance returns the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// setTOML stores v, a value decoded from TOML, in the field ptr points to.
// It returns what is wrong with v, or "".
func setTOML(ptr, v any) string {
	switch p := ptr.(type) {
	case *string:
		s, ok := v.(string)
		if !ok {
			return wrongType("a string", v)
		}
		*p = s
	case *bool:
		b, ok := v.(bool)
		if !ok {
			return wrongType("a boolean", v)
		}
		*p = b
	case *[]string:
		arr, ok := v.([]any)
		if !ok {
			return wrongType("an array of strings", v)
		}
		list := make([]string, 0, len(arr))
		for i, e := range arr {
			s, ok := e.(string)
			if !ok {
				return fmt.Sprintf("must be an array of strings, element %d is %s", i, describeTOML(e))
			}
			list = append(list, s)
		}
		*p = nilIfEmpty(list)
	case *int:
		n, ok := v.(int64)
		if !ok {
			return wrongType("an integer", v)
		}
		if int64(int(n)) != n {
			return fmt.Sprintf("%d does not fit in an int", n)
		}
		*p = int(n)
	case *int64:
		n, ok := v.(int64)
		if !ok {
			return wrongType("an integer", v)
		}
		*p = n
	case *float64:
		switch n := v.(type) {
		case float64:
			*p = n
		case int64:
			*p = float64(n)
		default:
			return wrongType("a number", v)
		}
	case *time.Duration:
		s, ok := v.(string)
		if !ok {
			return wrongType(`a duration string like "15s"`, v)
		}
		return setString(ptr, s)
	case *os.FileMode:
		s, ok := v.(string)
		if !ok {
			return wrongType(`a quoted octal string like "0660"`, v)
		}
		return setString(ptr, s)
	default:
		panic(fmt.Sprintf("daemon: no TOML decoding for %T", ptr))
	}
	return ""
}

// setString parses s, a value as a flag takes it or a TOML string, into the
// field ptr points to. It returns what is wrong with s, or "". A list is
// comma-separated, each element trimmed of spaces.
func setString(ptr any, s string) string {
	switch p := ptr.(type) {
	case *string:
		*p = s
	case *bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Sprintf("must be true or false, got %s", quoteValue(s))
		}
		*p = b
	case *[]string:
		list := strings.Split(s, ",")
		for i := range list {
			list[i] = strings.TrimSpace(list[i])
		}
		*p = list
	case *int:
		n, err := strconv.ParseInt(s, 10, strconv.IntSize)
		if err != nil {
			return fmt.Sprintf("must be a decimal integer, got %s", quoteValue(s))
		}
		*p = int(n)
	case *int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Sprintf("must be a decimal integer, got %s", quoteValue(s))
		}
		*p = n
	case *float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Sprintf("must be a decimal number like 0.25, got %s", quoteValue(s))
		}
		*p = f
	case *time.Duration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Sprintf(`must be a duration like "15s" or "100ms", got %s`, quoteValue(s))
		}
		*p = d
	case *os.FileMode:
		m, ok := parseMode(s)
		if !ok {
			return fmt.Sprintf(`must be an octal mode like "0660", got %s`, quoteValue(s))
		}
		*p = m
	default:
		panic(fmt.Sprintf("daemon: no string parsing for %T", ptr))
	}
	return ""
}

// parseMode parses one to four octal digits. The range is Validate's job.
func parseMode(s string) (os.FileMode, bool) {
	if len(s) == 0 || len(s) > 4 {
		return 0, false
	}
	for _, r := range s {
		if r < '0' || r > '7' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 8, 32)
	return os.FileMode(n), err == nil
}

// wrongType returns the message for a TOML value v that is not what the key
// takes.
func wrongType(want string, v any) string {
	return fmt.Sprintf("must be %s, got %s", want, describeTOML(v))
}

// describeTOML names a decoded TOML value by its TOML type, with the value when
// it is short.
func describeTOML(v any) string {
	switch v := v.(type) {
	case string:
		return "string " + quoteValue(v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return fmt.Sprintf("float %v", v)
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date-time"
	}
	return fmt.Sprintf("%T", v)
}

// quoteValue quotes s for a message, shortened so a huge value cannot flood a log.
func quoteValue(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

// nilIfEmpty returns nil for an empty list, so an empty list from a file or a
// flag compares equal to an unset one.
func nilIfEmpty(list []string) []string {
	if len(list) == 0 {
		return nil
	}
	return list
}
