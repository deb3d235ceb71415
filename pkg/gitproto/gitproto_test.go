package gitproto

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

const (
	zero = "0000000000000000000000000000000000000000"
	idA  = "1111111111111111111111111111111111111111"
	idB  = "2222222222222222222222222222222222222222"
)

func pkts(lines ...string) []byte {
	var b []byte
	for _, l := range lines {
		if l == "" {
			b = AppendFlush(b)
			continue
		}
		b = AppendString(b, l)
	}
	return b
}

func TestReaderKinds(t *testing.T) {
	in := append(pkts("hello\n", ""), "00010002"...)
	pr := NewReader(bytes.NewReader(in))
	want := []Kind{Data, Flush, Delim, ResponseEnd}
	for i, w := range want {
		k, p, err := pr.Read()
		if err != nil || k != w {
			t.Fatalf("line %d: kind %v err %v, want %v", i, k, err, w)
		}
		if k == Data && string(p) != "hello\n" {
			t.Fatalf("payload %q", p)
		}
	}
	if _, _, err := pr.Read(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if pr.Consumed() != int64(len(in)) {
		t.Fatalf("consumed %d of %d", pr.Consumed(), len(in))
	}
}

func TestReaderRefusesBadLengths(t *testing.T) {
	for _, in := range []string{"0003", "zzzz", "fff1" + strings.Repeat("a", 10), "00", "0009abc"} {
		_, _, err := NewReader(strings.NewReader(in)).Read()
		if err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

func TestReadCommandList(t *testing.T) {
	body := pkts(
		"shallow "+idA,
		zero+" "+idB+" refs/heads/openhands/x\x00report-status side-band-64k atomic push-options agent=git/2.39",
		idA+" "+zero+" refs/tags/v1\n",
		"",
		"ci.skip",
		"",
	)
	pack := []byte("PACK....")
	r := iotest.OneByteReader(io.MultiReader(bytes.NewReader(body), bytes.NewReader(pack)))
	l, raw, err := ReadCommandList(r, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, body) {
		t.Fatalf("raw %q, want the command list exactly", raw)
	}
	if len(l.Commands) != 2 || !l.Commands[0].IsCreate() || !l.Commands[1].IsDelete() || l.Commands[1].Ref != "refs/tags/v1" {
		t.Fatalf("commands %+v", l.Commands)
	}
	if !l.Has("atomic") || !l.Has("agent") || l.Has("quiet") || SidebandOf(l) != Sideband64k {
		t.Fatalf("caps %v", l.Caps)
	}
	if len(l.Shallow) != 1 || len(l.PushOptions) != 1 || l.PushOptions[0] != "ci.skip" {
		t.Fatalf("shallow %v options %v", l.Shallow, l.PushOptions)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "PACK...." {
		t.Fatalf("the pack was read into: %q left", rest)
	}
}

func TestReadCommandListRefuses(t *testing.T) {
	cases := map[string][]byte{
		"shallow only": pkts("shallow "+idA, ""),
		"two fields":   pkts(zero+" refs/heads/x", ""),
		"bad id":       pkts("xyz "+idB+" refs/heads/x", ""),
		"dotdot":       pkts(zero+" "+idB+" refs/heads/openhands/../../main", ""),
		"no refs/":     pkts(zero+" "+idB+" HEAD", ""),
		"lock":         pkts(zero+" "+idB+" refs/heads/a.lock", ""),
		"nul later":    pkts(zero+" "+idB+" refs/heads/a\x00x", zero+" "+idB+" refs/heads/b\x00y", ""),
		"delim":        append(pkts(zero+" "+idB+" refs/heads/a"), "0001"...),
		"id lengths":   pkts(zero+" "+idB+" refs/heads/a", strings.Repeat("1", 64)+" "+strings.Repeat("2", 64)+" refs/heads/b", ""),
	}
	for name, in := range cases {
		if _, _, err := ReadCommandList(bytes.NewReader(in), 1<<20); !errors.Is(err, ErrSyntax) {
			t.Errorf("%s: %v, want a syntax error", name, err)
		}
	}
	if _, _, err := ReadCommandList(bytes.NewReader(pkts("push-cert\x00report-status", "")), 1<<20); !errors.Is(err, ErrPushCert) {
		t.Errorf("push-cert: %v", err)
	}
	if _, _, err := ReadCommandList(bytes.NewReader(pkts(zero+" "+idB+" refs/heads/a")), 1<<20); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut short: %v", err)
	}
	var big []byte
	for i := 0; i < 1000; i++ {
		big = AppendString(big, zero+" "+idB+" refs/heads/openhands/x"+strings.Repeat("y", 100))
	}
	if _, _, err := ReadCommandList(bytes.NewReader(big), 64<<10); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized: %v", err)
	}
}

func TestReadCommandListProbe(t *testing.T) {
	l, raw, err := ReadCommandList(strings.NewReader("0000"), 1<<20)
	if err != nil || len(l.Commands) != 0 || string(raw) != "0000" {
		t.Fatalf("probe: %v %v %q", l, err, raw)
	}
}

func TestAppendReportSideband(t *testing.T) {
	refs := []RefStatus{{Ref: "refs/heads/main", Reason: "ohd: no\nreally"}, {Ref: "refs/heads/openhands/x"}}
	plain := AppendReport(nil, "ok", refs, NoSideband)
	want := pkts("unpack ok\n", "ng refs/heads/main ohd: no really\n", "ok refs/heads/openhands/x\n", "")
	if !bytes.Equal(plain, want) {
		t.Fatalf("plain %q\nwant  %q", plain, want)
	}
	sb := AppendReport(nil, "ok", refs, Sideband1k)
	pr := NewReader(bytes.NewReader(sb))
	var inner []byte
	for {
		k, p, err := pr.Read()
		if err != nil {
			t.Fatal(err)
		}
		if k == Flush {
			break
		}
		if p[0] != 1 {
			t.Fatalf("band %d", p[0])
		}
		inner = append(inner, p[1:]...)
	}
	if !bytes.Equal(inner, want) {
		t.Fatalf("side-band payload %q", inner)
	}
}

func FuzzReader(f *testing.F) {
	f.Add(pkts("hello\n", ""))
	f.Add([]byte("00010002000000"))
	f.Add([]byte("fff0"))
	f.Fuzz(func(t *testing.T, in []byte) {
		pr := NewReader(bytes.NewReader(in))
		for {
			k, p, err := pr.Read()
			if err != nil {
				break
			}
			if k == Data && len(p) > MaxPktPayload {
				t.Fatalf("payload of %d bytes", len(p))
			}
		}
		if pr.Consumed() > int64(len(in)) {
			t.Fatal("consumed more than the input")
		}
	})
}

func FuzzReadCommandList(f *testing.F) {
	f.Add(pkts(zero+" "+idB+" refs/heads/openhands/x\x00report-status side-band-64k", ""))
	f.Add(pkts("shallow "+idA, idA+" "+idB+" refs/heads/main\x00push-options", "", "opt", ""))
	f.Add(pkts("push-cert\x00x", ""))
	f.Fuzz(func(t *testing.T, in []byte) {
		l, raw, err := ReadCommandList(bytes.NewReader(in), 4096)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(in, raw) {
			t.Fatal("raw is not a prefix of the input")
		}
		if len(l.Commands) == 0 && (len(raw) != 4 || len(l.Caps) != 0) {
			t.Fatalf("an empty list that is not a lone flush parsed: %q", raw)
		}
		for _, c := range l.Commands {
			if !ValidRefName(c.Ref) || strings.Contains(c.Ref, "..") {
				t.Fatalf("ref %q accepted", c.Ref)
			}
		}
	})
}

func sideband(band byte, payload []byte) []byte {
	return AppendData(nil, append([]byte{band}, payload...))
}

func TestReadReport(t *testing.T) {
	plain := pkts("unpack ok\n", "ok refs/heads/openhands/a\n", "ng refs/heads/main stale info\n", "ng refs/heads/x\n", "")
	// report-status-v2 inside side-band-64k, with progress on channel 2
	// and the report split across two channel-1 packets.
	v2 := pkts("unpack ok\n", "ok refs/heads/openhands/a\n", "option refname refs/heads/openhands/a\n", "ng refs/heads/main stale info\n", "ng refs/heads/x\n", "")
	var sb []byte
	sb = append(sb, sideband(2, []byte("Resolving deltas: 100% (1/1)\r"))...)
	sb = append(sb, sideband(1, v2[:10])...)
	sb = append(sb, sideband(2, []byte("remote: hello\n"))...)
	sb = append(sb, sideband(1, v2[10:])...)
	sb = AppendFlush(sb)
	want := &Report{Unpack: "ok", Refs: []RefStatus{{Ref: "refs/heads/openhands/a"}, {Ref: "refs/heads/main", Reason: "stale info"}, {Ref: "refs/heads/x", Reason: "(no reason given)"}}}
	for name, c := range map[string]struct {
		in []byte
		sb Sideband
	}{"plain": {plain, NoSideband}, "side-band": {sb, Sideband64k}} {
		r := iotest.OneByteReader(io.MultiReader(bytes.NewReader(c.in), strings.NewReader("after")))
		got, err := ReadReport(r, c.sb, 100)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: ReadReport = %+v, want %+v", name, got, want)
		}
		if !got.OK("refs/heads/openhands/a") || got.OK("refs/heads/main") || got.OK("refs/heads/x") || got.OK("refs/heads/absent") {
			t.Errorf("%s: OK answers wrong", name)
		}
	}
	failed, err := ReadReport(bytes.NewReader(pkts("unpack index-pack abnormal exit\n", "ng refs/heads/openhands/a unpacker error\n", "")), NoSideband, 10)
	if err != nil || failed.OK("refs/heads/openhands/a") {
		t.Errorf("unpack failure: %+v %v", failed, err)
	}
}

func TestReadReportRefuses(t *testing.T) {
	cases := map[string]struct {
		in []byte
		sb Sideband
	}{
		"empty":         {nil, NoSideband},
		"lone flush":    {pkts(""), NoSideband},
		"no unpack":     {pkts("ok refs/heads/a\n", ""), NoSideband},
		"cut short":     {pkts("unpack ok\n", "ok refs/heads/a\n"), NoSideband},
		"bad ref":       {pkts("unpack ok\n", "ok refs/heads/../a\n", ""), NoSideband},
		"unknown verb":  {pkts("unpack ok\n", "maybe refs/heads/a\n", ""), NoSideband},
		"early option":  {pkts("unpack ok\n", "option refname refs/heads/a\n", ""), NoSideband},
		"too many":      {pkts("unpack ok\n", "ok refs/heads/a\n", "ok refs/heads/b\n", "ok refs/heads/c\n", ""), NoSideband},
		"fatal band":    {append(sideband(3, []byte("disk full")), "0000"...), Sideband64k},
		"band 4":        {append(sideband(4, []byte("x")), "0000"...), Sideband64k},
		"not side-band": {pkts("unpack ok\n", "ok refs/heads/a\n", ""), Sideband64k},
		"sb cut short":  {sideband(1, pkts("unpack ok\n")), Sideband64k},
	}
	for name, c := range cases {
		if rp, err := ReadReport(bytes.NewReader(c.in), c.sb, 2); err == nil {
			t.Errorf("%s: ReadReport = %+v, want an error", name, rp)
		}
	}
}

func FuzzReadReport(f *testing.F) {
	f.Add(pkts("unpack ok\n", "ok refs/heads/openhands/a\n", "ng refs/heads/main stale info\n", ""), false)
	f.Add(AppendReport(nil, "ok", []RefStatus{{Ref: "refs/heads/a"}, {Ref: "refs/heads/b", Reason: "no"}}, Sideband64k), true)
	f.Add(append(sideband(2, []byte("progress\r")), append(sideband(1, pkts("unpack ok\n", "ok refs/heads/x\n", "option old-oid "+idA+"\n", "")), "0000"...)...), true)
	f.Fuzz(func(t *testing.T, in []byte, sb bool) {
		mode := NoSideband
		if sb {
			mode = Sideband64k
		}
		rp, err := ReadReport(bytes.NewReader(in), mode, 64)
		if err != nil {
			return
		}
		if rp.Unpack == "" || len(rp.Refs) > 64 {
			t.Fatalf("accepted %+v", rp)
		}
		// What was read is what AppendReport would write: written again
		// and read back, every ref keeps its verdict.
		again, err := ReadReport(bytes.NewReader(AppendReport(nil, rp.Unpack, rp.Refs, mode)), mode, 64)
		if err != nil {
			t.Fatalf("a report written back does not read: %v", err)
		}
		for i, r := range rp.Refs {
			if !ValidRefName(r.Ref) || again.Refs[i].Ref != r.Ref || (again.Refs[i].Reason == "") != (r.Reason == "") {
				t.Fatalf("ref %d: %+v read back as %+v", i, r, again.Refs[i])
			}
		}
	})
}
