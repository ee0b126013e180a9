package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/autonomic-kernel/autonomic/kernel/api"
	"github.com/autonomic-kernel/autonomic/protocol"
)

// TokenFileName is the console's token under state_dir.
const TokenFileName = "console.token"

const cookieName = "autonomic_console"

//go:embed static/* templates/*
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"short": func(s string) string {
		if len(s) > 8 {
			return s[:8]
		}
		return s
	},
	"describe": func(e api.EventView) string { return api.DescribeEvent(e.Kind, e.Body) },
	"clock":    func(t time.Time) string { return t.Local().Format(time.TimeOnly) },
	"when":     func(t time.Time) string { return t.Local().Format(time.DateTime) },
	"text":     func(b json.RawMessage) string { return api.OneLine(b) },
}).ParseFS(files, "templates/*.html"))

// Console serves the pages.
type Console struct {
	client *api.Client
	token  []byte
	host   string // the Host a TCP request must name ("" on a Unix socket)
	mux    *http.ServeMux
}

// New is the console over the API socket, authenticated with token and,
// for a TCP listen address, answering only its own Host.
func New(apiSocket string, token []byte, listen string) *Console {
	c := &Console{client: api.NewClient(apiSocket), token: token, mux: http.NewServeMux()}
	if !strings.HasPrefix(listen, "unix:") {
		c.host = listen
	}
	static, _ := fs.Sub(files, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.mux.HandleFunc("GET /login", c.login)
	c.mux.HandleFunc("GET /{$}", c.overview)
	c.mux.HandleFunc("GET /episodes/{id}", c.episode)
	c.mux.HandleFunc("GET /episodes/{id}/events", c.events)
	c.mux.HandleFunc("GET /effects/{id}/patch", c.patch)
	return c
}

// MakeToken writes a new random token to state_dir/console.token, mode
// 0640, owned by the kernel's account and gid (the operator group; -1
// keeps the account's), replacing any earlier one, and returns it.
func MakeToken(stateDir string, gid int) ([]byte, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	tok := []byte(hex.EncodeToString(raw))
	p := filepath.Join(stateDir, TokenFileName)
	tmp := p + ".new"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return nil, err
	}
	_, err = f.Write(append(tok, '\n'))
	err = errors.Join(err, f.Chmod(0o640), f.Chown(-1, gid), f.Close())
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return nil, err
	}
	return tok, nil
}

// ServeHTTP authenticates, checks the Host, sets the security headers and
// serves.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "+
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if c.host != "" && !c.hostAllowed(r.Host) {
		http.Error(w, "misdirected request", http.StatusMisdirectedRequest)
		return
	}
	if r.URL.Path != "/login" && !strings.HasPrefix(r.URL.Path, "/static/") && !c.authenticated(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="autonomic console"`)
		http.Error(w, "log in: open /login?token=… with the token in state_dir/"+TokenFileName, http.StatusUnauthorized)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// hostAllowed: the configured address, or localhost at its port.
func (c *Console) hostAllowed(host string) bool {
	if host == c.host {
		return true
	}
	_, port, err := net.SplitHostPort(c.host)
	return err == nil && host == net.JoinHostPort("localhost", port)
}

func (c *Console) authenticated(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return c.match(tok)
	}
	if ck, err := r.Cookie(cookieName); err == nil {
		return c.match(ck.Value)
	}
	return false
}

func (c *Console) match(s string) bool {
	return len(c.token) > 0 && subtle.ConstantTimeCompare([]byte(s), c.token) == 1
}

// login takes the token once and sets the session cookie.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("token")
	if !c.match(tok) {
		http.Error(w, "wrong token", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (c *Console) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, name, data); err != nil {
		http.Error(w, "render", http.StatusInternalServerError)
	}
}

func (c *Console) fail(w http.ResponseWriter, err error) {
	code := protocol.AsWire(err).Code
	status := http.StatusBadGateway
	if code == protocol.CodeNotFound || code == protocol.CodeInvalidField {
		status = http.StatusNotFound
	}
	http.Error(w, string(code), status)
}

// overview: autonomy, the Actions waiting, the episodes.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	k, err := c.client.Kernel(ctx)
	if err != nil {
		c.fail(w, err)
		return
	}
	eps, err := c.client.Episodes(ctx, 50)
	if err != nil {
		c.fail(w, err)
		return
	}
	actions, err := api.PendingActions(ctx, c.client, 50)
	if err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "overview.html", map[string]any{"Kernel": k, "Episodes": eps, "Actions": actions})
}

// episode: one episode, its timeline, its effects, its ledger.
func (c *Console) episode(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	id := r.PathValue("id")
	ep, err := c.client.Episode(ctx, id)
	if err != nil {
		c.fail(w, err)
		return
	}
	evs, err := c.client.Events(ctx, id, -1, 500)
	if err != nil {
		c.fail(w, err)
		return
	}
	effs, err := c.client.Effects(ctx, id)
	if err != nil {
		c.fail(w, err)
		return
	}
	var detailed []api.EffectView
	for _, f := range effs {
		if d, err := c.client.Effect(ctx, f.ID); err == nil {
			f = d
		}
		detailed = append(detailed, f)
	}
	actions, err := c.client.Actions(ctx, id, false)
	if err != nil {
		c.fail(w, err)
		return
	}
	ver, verr := c.client.Verify(ctx, id)
	last := int64(-1)
	if len(evs) > 0 {
		last = evs[len(evs)-1].Seq
	}
	c.render(w, "episode.html", map[string]any{"Episode": ep, "Events": evs, "Effects": detailed, "Actions": actions,
		"Verify": ver, "VerifyErr": verr != nil, "Last": last})
}

// events is the live timeline: entries after ?after=SEQ, described.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	after, err := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if err != nil || after < -1 {
		http.Error(w, "after", http.StatusBadRequest)
		return
	}
	evs, err := c.client.Events(r.Context(), r.PathValue("id"), after, 200)
	if err != nil {
		c.fail(w, err)
		return
	}
	type row struct {
		Seq   int64  `json:"seq"`
		At    string `json:"at"`
		Epoch int64  `json:"epoch"`
		Text  string `json:"text"`
	}
	out := []row{}
	for _, e := range evs {
		out = append(out, row{Seq: e.Seq, At: e.At.Local().Format(time.TimeOnly), Epoch: e.Epoch, Text: api.DescribeEvent(e.Kind, e.Body)})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// patch shows a git_commit effect's stored patch as text.
func (c *Console) patch(w http.ResponseWriter, r *http.Request) {
	p, err := c.client.Patch(r.Context(), r.PathValue("id"))
	if err != nil {
		c.fail(w, err)
		return
	}
	b, err := base64.StdEncoding.DecodeString(p.PatchB64)
	if err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "patch.html", map[string]any{"Effect": p.EffectID, "State": p.State, "Patch": string(b)})
}

// Serve serves the console on l until ctx ends.
func (c *Console) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); err != http.ErrServerClosed {
		return fmt.Errorf("console: %w", err)
	}
	return nil
}
