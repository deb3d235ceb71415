package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ohd-dev/ohd/internal/testenv"
)

// chromium returns Debian's headless Chromium (.ci/run installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.Missing(t, "no chromium on PATH: apt-get install chromium")
	return ""
}

// browserPage is what the page served to Chromium does, from its own
// origin, against ohd at another origin: what Agent Canvas does first
// (every call with X-Session-API-Key, so the browser preflights each):
// create a conversation, read it, open its events socket (browsers set
// no headers on a WebSocket: the key goes in the query, as Canvas sends
// it). Each step's outcome is posted back to the page's own server.
var browserPage = template.Must(template.New("page").Parse(`<!doctype html>
<html><body><script>
const ohd = {{.OHD}}, key = {{.Key}}, repo = {{.Repo}};
const results = {};
async function report() {
  await fetch("/report", {method: "POST", body: JSON.stringify(results)});
}
async function main() {
  let id = "";
  try {
    const r = await fetch(ohd + "/api/conversations", {
      method: "POST",
      headers: {"X-Session-API-Key": key, "Content-Type": "application/json"},
      body: JSON.stringify({workspace: {kind: "LocalWorkspace", working_dir: repo}, worktree: true}),
    });
    const info = await r.json();
    id = info.id || "";
    results.create = r.status + " " + id;
  } catch (e) { results.create = "error " + e.name; }
  if (id) {
    try {
      const r = await fetch(ohd + "/api/conversations/" + id, {headers: {"X-Session-API-Key": key}});
      const info = await r.json();
      results.get = r.status + " " + info.id;
    } catch (e) { results.get = "error " + e.name; }
  }
  const sid = id || "00000000-0000-4000-8000-000000000000";
  results.socket = await new Promise((resolve) => {
    const ws = new WebSocket(ohd.replace("http", "ws") + "/sockets/events/" + sid + "?session_api_key=" + encodeURIComponent(key));
    const timer = setTimeout(() => resolve("timeout"), 20000);
    ws.onopen = () => { clearTimeout(timer); ws.close(1000); resolve("open"); };
    ws.onerror = () => { clearTimeout(timer); resolve("error"); };
  });
  await report();
}
main();
</script></body></html>`))

// pageServer serves browserPage and collects the reports.
type pageServer struct {
	addr    string
	reports chan map[string]string
	mu      sync.Mutex
	params  map[string]string // OHD, Key, Repo
}

func startPageServer(t *testing.T) *pageServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &pageServer{addr: ln.Addr().String(), reports: make(chan map[string]string, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /page.html", func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		params := ps.params
		ps.mu.Unlock()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = browserPage.Execute(w, params)
	})
	mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if json.Unmarshal(b, &m) == nil {
			ps.reports <- m
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ps
}

func (ps *pageServer) set(ohd, key, repo string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.params = map[string]string{"OHD": ohd, "Key": key, "Repo": repo}
}

// loadInChromium opens url in a headless Chromium (hosts given in
// resolve are mapped to 127.0.0.1) and waits for the page's report.
func loadInChromium(t *testing.T, bin, url string, resolve []string, reports chan map[string]string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + filepath.Join(testenv.TempDir(t), "profile")}
	if len(resolve) > 0 {
		var rules []string
		for _, h := range resolve {
			rules = append(rules, "MAP "+h+" 127.0.0.1")
		}
		args = append(args, "--host-resolver-rules="+strings.Join(rules, ","))
	}
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		wg.Wait()
	}()
	select {
	case m := <-reports:
		return m
	case <-ctx.Done():
		t.Fatalf("chromium loading %s reported nothing in time; its output:\n%s", url, tail(logs.String(), 30))
	}
	return nil
}

// TestBackendBrowserCORS: a page in a real browser (Debian's headless Chromium)
// on one loopback port creates a conversation through ohd on another
// (a cross-origin call with X-Session-API-Key, so preflighted), reads it
// and opens its events socket; a page of an origin --cors-origin names
// does the same; the same page from an origin not allowed gets nothing
// (its preflight is refused, its socket too) and creates nothing.
func TestBackendBrowserCORS(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		bin := chromium(t)
		ps := startPageServer(t)
		_, port, _ := net.SplitHostPort(ps.addr)
		// allowed.test and evil.test are the page server too (Chromium maps
		// them to 127.0.0.1): two origins that are not loopback by name.
		d := b.daemon(t, "--cors-origin", "http://allowed.test:"+port)
		key := d.apiKey()
		ohd := "http://" + d.listen

		for _, tc := range []struct {
			name, origin string
			allowed      bool
		}{
			{"loopback origin, another port", "http://127.0.0.1:" + port, true},
			{"origin named by --cors-origin", "http://allowed.test:" + port, true},
			{"origin not allowed", "http://evil.test:" + port, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				repo := testenv.NewRepo(t, testenv.RepoOptions{})
				ps.set(ohd, key, repo)
				before := d.call("GET", "/api/conversations/count", nil)
				got := loadInChromium(t, bin, tc.origin+"/page.html", []string{"allowed.test", "evil.test"}, ps.reports)
				after := d.call("GET", "/api/conversations/count", nil)
				if !tc.allowed {
					want := map[string]string{"create": "error TypeError", "socket": "error"}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("page from %s got %v, want %v (every call refused by the browser)", tc.origin, got, want)
					}
					if string(before.Body) != string(after.Body) {
						t.Errorf("a refused page changed the conversation count: %s → %s", before.Body, after.Body)
					}
					return
				}
				id, _ := strings.CutPrefix(got["create"], "201 ")
				if len(id) != 36 || got["get"] != "200 "+id || got["socket"] != "open" {
					t.Fatalf("page from %s got %v, want create 201, get 200 of that id, socket open\n%s", tc.origin, got, tail(d.logs.String(), 20))
				}
				if r := d.call("GET", "/api/conversations/"+id, nil); r.Status != 200 {
					t.Errorf("the browser's conversation %s is not there: %d %s", id, r.Status, r.Body)
				}
				if r := d.call("DELETE", "/api/conversations/"+id, nil); r.Status != 200 {
					t.Errorf("delete %s = %d %s", id, r.Status, r.Body)
				}
			})
		}
	})
}
