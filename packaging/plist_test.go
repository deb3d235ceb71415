package packaging

import (
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// parsePlist parses an XML property list strictly, as `plutil -lint` would
// accept it: an optional XML declaration and DOCTYPE, one <plist
// version="1.0"> holding one value; <dict> holds <key>/value pairs (no
// duplicate keys); values are dict, array, string, integer, real, true,
// false, date and data, each well-formed; no stray text and no attributes
// but plist's version. It returns map[string]any, []any, string, int64,
// float64, bool, time.Time or []byte.
func parsePlist(r io.Reader) (any, error) {
	d := xml.NewDecoder(r)
	d.Strict = true
	var root any
	seenRoot, seenDoctype := false, false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch tok := tok.(type) {
		case xml.ProcInst, xml.Comment:
		case xml.Directive:
			if seenRoot || seenDoctype || !strings.HasPrefix(string(tok), "DOCTYPE plist ") {
				return nil, fmt.Errorf("unexpected directive <!%s>", tok)
			}
			seenDoctype = true
		case xml.CharData:
			if strings.TrimSpace(string(tok)) != "" {
				return nil, fmt.Errorf("text %q outside the plist element", tok)
			}
		case xml.StartElement:
			if seenRoot {
				return nil, errors.New("more than one root element")
			}
			seenRoot = true
			if tok.Name.Local != "plist" || len(tok.Attr) != 1 || tok.Attr[0].Name.Local != "version" || tok.Attr[0].Value != "1.0" {
				return nil, fmt.Errorf("root element <%s %v>, want <plist version=\"1.0\">", tok.Name.Local, tok.Attr)
			}
			v, end, err := parseValue(d)
			if err != nil {
				return nil, err
			}
			if end {
				return nil, errors.New("<plist> holds no value")
			}
			root = v
			if err := expectEnd(d, "plist"); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("unexpected %T", tok)
		}
	}
	if !seenRoot {
		return nil, errors.New("no <plist> element")
	}
	return root, nil
}

// next returns the next start or end element, skipping comments and
// whitespace; other text is an error.
func next(d *xml.Decoder) (xml.Token, error) {
	for {
		tok, err := d.Token()
		if err != nil {
			if err == io.EOF {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(tok.Attr) != 0 {
				return nil, fmt.Errorf("<%s> has attributes", tok.Name.Local)
			}
			return tok, nil
		case xml.EndElement:
			return tok, nil
		case xml.Comment:
		case xml.CharData:
			if strings.TrimSpace(string(tok)) != "" {
				return nil, fmt.Errorf("stray text %q", tok)
			}
		default:
			return nil, fmt.Errorf("unexpected %T inside the plist", tok)
		}
	}
}

func expectEnd(d *xml.Decoder, name string) error {
	tok, err := next(d)
	if err != nil {
		return err
	}
	if e, ok := tok.(xml.EndElement); !ok || e.Name.Local != name {
		return fmt.Errorf("want </%s>, got %v", name, tok)
	}
	return nil
}

// text reads character data up to the end of the current element; no child
// elements are allowed.
func text(d *xml.Decoder, name string) (string, error) {
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return "", err
		}
		switch tok := tok.(type) {
		case xml.CharData:
			b.Write(tok)
		case xml.Comment:
		case xml.EndElement:
			return b.String(), nil
		default:
			return "", fmt.Errorf("<%s> holds %T, want text", name, tok)
		}
	}
}

// parseValue reads one value; end is true when it met the end of the
// enclosing element instead.
func parseValue(d *xml.Decoder) (v any, end bool, err error) {
	tok, err := next(d)
	if err != nil {
		return nil, false, err
	}
	if _, ok := tok.(xml.EndElement); ok {
		return nil, true, nil
	}
	name := tok.(xml.StartElement).Name.Local
	switch name {
	case "dict":
		m := map[string]any{}
		for {
			tok, err := next(d)
			if err != nil {
				return nil, false, err
			}
			if _, ok := tok.(xml.EndElement); ok {
				return m, false, nil
			}
			if tok.(xml.StartElement).Name.Local != "key" {
				return nil, false, fmt.Errorf("<dict> holds <%s> where a <key> belongs", tok.(xml.StartElement).Name.Local)
			}
			k, err := text(d, "key")
			if err != nil {
				return nil, false, err
			}
			if _, dup := m[k]; dup {
				return nil, false, fmt.Errorf("duplicate key %q", k)
			}
			v, end, err := parseValue(d)
			if err != nil {
				return nil, false, fmt.Errorf("key %q: %w", k, err)
			}
			if end {
				return nil, false, fmt.Errorf("key %q has no value", k)
			}
			m[k] = v
		}
	case "array":
		a := []any{}
		for {
			v, end, err := parseValue(d)
			if err != nil {
				return nil, false, err
			}
			if end {
				return a, false, nil
			}
			a = append(a, v)
		}
	case "true", "false":
		if err := expectEnd(d, name); err != nil {
			return nil, false, err
		}
		return name == "true", false, nil
	case "string":
		s, err := text(d, name)
		return s, false, err
	case "integer":
		s, err := text(d, name)
		if err != nil {
			return nil, false, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return n, false, err
	case "real":
		s, err := text(d, name)
		if err != nil {
			return nil, false, err
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		return f, false, err
	case "date":
		s, err := text(d, name)
		if err != nil {
			return nil, false, err
		}
		tm, err := time.Parse("2006-01-02T15:04:05Z", strings.TrimSpace(s))
		return tm, false, err
	case "data":
		s, err := text(d, name)
		if err != nil {
			return nil, false, err
		}
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
		return b, false, err
	}
	return nil, false, fmt.Errorf("<%s> is not a property-list value", name)
}

// launchdKeys are the top-level keys launchd.plist(5) documents; launchd
// ignores any other key, so a typo would silently drop a setting.
var launchdKeys = strings.Fields(`Label Disabled UserName GroupName inetdCompatibility
	LimitLoadToHosts LimitLoadFromHosts LimitLoadToSessionType LimitLoadToHardware
	LimitLoadFromHardware Program ProgramArguments EnableGlobbing EnableTransactions
	EnablePressuredExit OnDemand ServiceIPC KeepAlive RunAtLoad RootDirectory
	WorkingDirectory EnvironmentVariables Umask TimeOut ExitTimeOut ThrottleInterval
	InitGroups WatchPaths QueueDirectories StartOnMount StartInterval
	StartCalendarInterval StandardInPath StandardOutPath StandardErrorPath Debug
	WaitForDebugger SoftResourceLimits HardResourceLimits Nice ProcessType
	AbandonProcessGroup LowPriorityIO LowPriorityBackgroundIO MaterializeDatalessFiles
	LaunchOnlyOnce MachServices Sockets LaunchEvents SessionCreate LegacyTimers
	AssociatedBundleIdentifiers`)

var keepAliveKeys = []string{"SuccessfulExit", "NetworkState", "PathState", "OtherJobEnabled", "Crashed", "AfterInitialDemand"}

const plistPath = "launchd/dev.ohd.ohd.plist"

func TestLaunchdPlist(t *testing.T) {
	f := readFile(t, plistPath)
	v, err := parsePlist(strings.NewReader(f))
	if err != nil {
		t.Fatalf("%s is not a valid property list: %v", plistPath, err)
	}
	job, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: top-level value is %T, want a dict", plistPath, v)
	}
	for k := range job {
		if !slices.Contains(launchdKeys, k) {
			t.Errorf("%s: key %q is not a launchd.plist key (launchd would ignore it)", plistPath, k)
		}
	}
	// launchd requires the label; the file is named after it.
	if label, _ := job["Label"].(string); label+".plist" != filepath.Base(plistPath) {
		t.Errorf("%s: Label %v, want the file's name without .plist", plistPath, job["Label"])
	}
	args, ok := job["ProgramArguments"].([]any)
	if !ok || len(args) < 2 {
		t.Fatalf("%s: ProgramArguments = %v, want an array starting %s serve", plistPath, job["ProgramArguments"], installedOhd)
	}
	var argv []string
	for _, a := range args {
		s, ok := a.(string)
		if !ok {
			t.Fatalf("%s: ProgramArguments holds %T %v, want strings only", plistPath, a, a)
		}
		argv = append(argv, s)
	}
	if argv[0] != installedOhd || argv[1] != "serve" {
		t.Errorf("%s: ProgramArguments = %q, want %s serve ...", plistPath, argv, installedOhd)
	}
	help := ohdServeHelp(t)
	for _, a := range argv[2:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !help.flags[name] {
				t.Errorf("%s: ProgramArguments flag %s is not a flag of ohd serve", plistPath, a)
			}
		}
	}
	env, ok := job["EnvironmentVariables"].(map[string]any)
	if !ok {
		t.Fatalf("%s: EnvironmentVariables = %T, want a dict", plistPath, job["EnvironmentVariables"])
	}
	for k, v := range env {
		if _, ok := v.(string); !ok {
			t.Errorf("%s: EnvironmentVariables[%s] is %T, want a string", plistPath, k, v)
		}
		if strings.HasPrefix(k, "OHD_") && !help.env[k] {
			t.Errorf("%s: EnvironmentVariables names $%s, which ohd serve does not read", plistPath, k)
		}
	}
	for _, k := range []string{"OHD_STATE_DIR", "OHD_RUNTIME_DIR"} {
		p, _ := env[k].(string)
		// Canonical paths: Docker Desktop gets them verbatim for mounts.
		if !filepath.IsAbs(p) || strings.HasPrefix(p, "/var/") || strings.HasPrefix(p, "/tmp/") || strings.HasPrefix(p, "/etc/") {
			t.Errorf("%s: %s=%q: want an absolute path without macOS's /var, /tmp, /etc symlinks", plistPath, k, p)
		}
	}
	if b, ok := job["RunAtLoad"].(bool); !ok || !b {
		t.Errorf("%s: RunAtLoad = %v, want true", plistPath, job["RunAtLoad"])
	}
	switch ka := job["KeepAlive"].(type) {
	case bool:
	case map[string]any:
		for k := range ka {
			if !slices.Contains(keepAliveKeys, k) {
				t.Errorf("%s: KeepAlive key %q is not one launchd knows", plistPath, k)
			}
		}
	default:
		t.Errorf("%s: KeepAlive = %T, want a bool or a dict", plistPath, ka)
	}
	for _, k := range []string{"StandardOutPath", "StandardErrorPath"} {
		if p, ok := job[k].(string); !ok || !filepath.IsAbs(p) {
			t.Errorf("%s: %s = %v, want an absolute path", plistPath, k, job[k])
		}
	}
}

// The parser is strict enough to be a lint: each of these is rejected.
func TestParsePlistRejects(t *testing.T) {
	const head = `<?xml version="1.0" encoding="UTF-8"?>` + "\n"
	tests := map[string]string{
		"not xml":           `plist`,
		"empty":             ``,
		"no plist element":  head,
		"wrong root":        head + `<dict></dict>`,
		"no version":        head + `<plist><dict/></plist>`,
		"empty plist":       head + `<plist version="1.0"></plist>`,
		"two values":        head + `<plist version="1.0"><dict/><dict/></plist>`,
		"key without value": head + `<plist version="1.0"><dict><key>Label</key></dict></plist>`,
		"value without key": head + `<plist version="1.0"><dict><string>x</string></dict></plist>`,
		"duplicate key":     head + `<plist version="1.0"><dict><key>a</key><true/><key>a</key><false/></dict></plist>`,
		"unknown type":      head + `<plist version="1.0"><dict><key>a</key><bool>yes</bool></dict></plist>`,
		"bad integer":       head + `<plist version="1.0"><integer>ten</integer></plist>`,
		"bad real":          head + `<plist version="1.0"><real>1,5</real></plist>`,
		"bad date":          head + `<plist version="1.0"><date>yesterday</date></plist>`,
		"bad data":          head + `<plist version="1.0"><data>!!</data></plist>`,
		"text in true":      head + `<plist version="1.0"><true>yes</true></plist>`,
		"stray text":        head + `<plist version="1.0"><dict>oops<key>a</key><true/></dict></plist>`,
		"nested in string":  head + `<plist version="1.0"><string><b>x</b></string></plist>`,
		"attribute":         head + `<plist version="1.0"><string id="1">x</string></plist>`,
		"unclosed":          head + `<plist version="1.0"><dict><key>a</key><true/>`,
		"mismatched":        head + `<plist version="1.0"><dict></array></plist>`,
		"trailing root":     head + `<plist version="1.0"><true/></plist><plist version="1.0"><true/></plist>`,
	}
	for name, in := range tests {
		if v, err := parsePlist(strings.NewReader(in)); err == nil {
			t.Errorf("parsePlist(%s: %q) = %v, want an error", name, in, v)
		}
	}
	ok := head + `<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0"><!-- c --><dict>
	<key>s</key><string>a &amp; b</string><key>i</key><integer>-3</integer>
	<key>r</key><real>1.5</real><key>t</key><true/><key>f</key><false/>
	<key>d</key><date>2024-01-02T03:04:05Z</date><key>b</key><data>aGk=</data>
	<key>a</key><array><string>x</string><array/><dict/></array>
</dict></plist>`
	v, err := parsePlist(strings.NewReader(ok))
	if err != nil {
		t.Fatalf("parsePlist(every value type) = %v", err)
	}
	want := fmt.Sprint(map[string]any{
		"s": "a & b", "i": int64(-3), "r": 1.5, "t": true, "f": false,
		"d": time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), "b": []byte("hi"),
		"a": []any{"x", []any{}, map[string]any{}},
	})
	if got := fmt.Sprint(v); got != want {
		t.Errorf("parsePlist(every value type) = %s, want %s", got, want)
	}
}

func FuzzParsePlist(f *testing.F) {
	f.Add(`<plist version="1.0"><dict><key>Label</key><string>x</string></dict></plist>`)
	f.Fuzz(func(t *testing.T, in string) {
		// Must not panic or hang; values it accepts must be plist types.
		v, err := parsePlist(strings.NewReader(in))
		if err == nil {
			checkTypes(t, v)
		}
	})
}

func checkTypes(t *testing.T, v any) {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			checkTypes(t, e)
		}
	case []any:
		for _, e := range v {
			checkTypes(t, e)
		}
	case string, int64, float64, bool, time.Time, []byte:
	default:
		t.Fatalf("parsePlist returned a %T", v)
	}
}
