package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/combmq/comb/protocol"
	"github.com/combmq/comb/web"
)

// webSpool is the status page's spool card.
func (b *Broker) webSpool() web.Spool {
	s := b.br.SpoolState()
	if s == nil {
		return web.Spool{Note: web.NoSpool, Maintenance: b.br.Maintenance()}
	}
	return web.Spool{Enabled: true, Maintenance: b.br.Maintenance(), Bytes: s.Bytes, MaxBytes: s.MaxBytes,
		Records: s.Records, Messages: s.Messages, OldestAgeS: s.OldestAgeS, Drained: s.Drained, DrainRate: s.DrainRate}
}

// DefaultHTTP is the HTTP listener's address unless the configuration
// says otherwise: loopback, so that only the operator's own machine sees
// the metrics and the status page.
const DefaultHTTP = "127.0.0.1:8480"

// httpServer is the broker's HTTP listener: the handlers its parts
// register on Mux, served until stop.
type httpServer struct {
	mux  *http.ServeMux
	addr net.Addr
	srv  *http.Server
}

// listenHTTP binds addr and starts serving mux; handlers may be added to
// mux until the first request that needs them.
func listenHTTP(addr string, log *slog.Logger) (*httpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http listener %s: %w (choose another with -http, COMB_HTTP or http in the file; empty turns it off)", addr, err)
	}
	h := &httpServer{mux: http.NewServeMux(), addr: ln.Addr()}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	h.srv = &http.Server{Handler: h.mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("http server", "err", err)
		}
	}()
	log.Info("http listening", "url", "http://"+h.addr.String()+"/")
	return h, nil
}

func (h *httpServer) stop() { _ = h.srv.Close() }

// readiness is /readyz's JSON: whether this broker should get traffic,
// and each check's state. Checks name what failed, never a host or URL.
type readiness struct {
	Ready  bool              `json:"ready"`
	Checks map[string]string `json:"checks"`
	// Maintenance is the bridge's mode; Spool its spool, absent when it
	// has none.
	Maintenance bool                 `json:"maintenance"`
	Spool       *protocol.SpoolState `json:"spool,omitempty"`
}

// spoolReadyFraction is how full the spool may be for /readyz to say
// ready: past it, new traffic should go to another broker.
const spoolReadyFraction = 0.9

// readyz answers 200 when the broker has started, is not stopping, its
// NATS server accepts connections and PostgreSQL answers a ping within a
// second; 503 otherwise, with the JSON saying which check failed.
func (b *Broker) readyz(w http.ResponseWriter, r *http.Request) {
	rd := readiness{Ready: true, Checks: map[string]string{}}
	check := func(name string, ok bool, why string) {
		if ok {
			rd.Checks[name] = "ok"
			return
		}
		rd.Ready = false
		rd.Checks[name] = why
	}
	started := b.ready.Load()
	check("broker", started, "starting or stopping")
	if started {
		check("nats", b.srv.NATS().ReadyForConnections(50*time.Millisecond), "not accepting connections")
		rd.Maintenance = b.br.Maintenance()
		check("maintenance", !rd.Maintenance, "on")
		if rd.Maintenance {
			// Maintenance reads nothing from PostgreSQL, pings included.
			rd.Checks["postgresql"] = "not checked in maintenance"
		} else {
			ctx, cancel := context.WithTimeout(r.Context(), time.Second)
			err := b.st.Ping(ctx)
			cancel()
			check("postgresql", err == nil, "unreachable")
		}
		if st := b.br.SpoolState(); st != nil {
			rd.Spool = st
			check("spool", float64(st.Bytes) <= spoolReadyFraction*float64(st.MaxBytes),
				fmt.Sprintf("over %.0f%% full", 100*spoolReadyFraction))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !rd.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(rd)
}
