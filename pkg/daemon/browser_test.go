package daemon

import (
	"strings"
	"testing"
)

// TestValidateBrowserFlags: --cors-origin must be an origin and
// --workspace-root an existing absolute directory other than /; the error
// names the flag.
func TestValidateBrowserFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		cors    []string
		roots   []string
		wantErr string
	}{
		{name: "ok", cors: []string{"https://canvas.example.com", "http://10.0.0.5:3001"}, roots: []string{dir}},
		{name: "origin with a path", cors: []string{"https://canvas.example.com/app"}, wantErr: "--cors-origin"},
		{name: "not an origin", cors: []string{"canvas.example.com"}, wantErr: "--cors-origin"},
		{name: "relative root", roots: []string{"home/u"}, wantErr: "--workspace-root"},
		{name: "root /", roots: []string{"/"}, wantErr: "--workspace-root"},
		{name: "missing root", roots: []string{dir + "/nope"}, wantErr: "--workspace-root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{StateDir: dir, RuntimeDir: dir, Getenv: func(string) string { return "" }, CORSOrigins: tc.cors, WorkspaceRoots: tc.roots}
			if err := c.Defaults(); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.wantErr)
			}
		})
	}
}
