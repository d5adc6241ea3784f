package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	comb "github.com/combmq/comb/clients/go"
	"github.com/combmq/comb/protocol"
)

func init() { registerOps(maintenanceCmd) }

// maintenanceCmd turns a broker's maintenance mode on or off, or shows it.
var maintenanceCmd = opsCommand{
	name: "maintenance", args: "[on|off]", summary: "turn a broker's maintenance mode on or off, or show it and its spool",
	synopsis: "In maintenance mode a broker spools every push to its disk (answered \"spooled\"),\n" +
		"answers 503 to every other verb and reads nothing from PostgreSQL; off drains the\n" +
		"spool. Without an argument, show the mode and the spool. With several brokers in one\n" +
		"queue group, the request reaches one of them: connect to the broker you mean.",
	minArgs: 0, maxArgs: 1,
	setup: func(fs *pflag.FlagSet) func(context.Context, *session, []string) error {
		return func(ctx context.Context, s *session, args []string) error {
			var req protocol.MaintenanceRequest
			if len(args) == 1 {
				on := args[0] == "on"
				if !on && args[0] != "off" {
					return usagef("%q: want on or off", args[0])
				}
				req.On = &on
			}
			body, err := json.Marshal(req)
			if err != nil {
				return err
			}
			var rep protocol.MaintenanceReply
			if err := s.callRaw(ctx, func(ctx context.Context, _ *comb.Client) error {
				m, err := s.nc.RequestWithContext(ctx, protocol.Subject(s.conn.prefix, protocol.VerbMaintenance, ""), body)
				if err != nil {
					return fmt.Errorf("maintenance: %w", err)
				}
				if code := m.Header.Get(protocol.HeaderErrorCode); code != "" {
					return fmt.Errorf("maintenance: %s %s", code, m.Header.Get(protocol.HeaderError))
				}
				return json.Unmarshal(m.Data, &rep)
			}); err != nil {
				if isNoResponders(err) {
					return fmt.Errorf("%w (is it a Comb broker, and are you in its global account?)", err)
				}
				return err
			}
			if s.json {
				return s.printJSON(rep)
			}
			mode := "off"
			if rep.Maintenance {
				mode = "on"
			}
			fmt.Fprintf(s.env.Stdout, "maintenance %s\n", mode)
			if sp := rep.Spool; sp != nil {
				fmt.Fprintf(s.env.Stdout, "spool: %d records (%d messages), %d of %d bytes, oldest %.1f s, %d drained (%.0f/s)\n",
					sp.Records, sp.Messages, sp.Bytes, sp.MaxBytes, sp.OldestAgeS, sp.Drained, sp.DrainRate)
			} else {
				fmt.Fprintln(s.env.Stdout, "spool: none (spool_max_bytes is 0)")
			}
			return nil
		}
	},
}

func isNoResponders(err error) bool { return errors.Is(err, nats.ErrNoResponders) }
