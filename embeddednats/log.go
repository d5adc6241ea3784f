package embeddednats

import (
	"context"
	"fmt"
	"log/slog"
)

// levelTrace is below Debug: protocol traces are only for deep debugging.
const levelTrace = slog.LevelDebug - 4

// slogLogger adapts nats-server's printf logger to slog. It also reports
// the first fatal message, which Start turns into its error instead of
// waiting out the ready timeout.
type slogLogger struct {
	log   *slog.Logger
	fatal chan string // capacity 1; later fatals are only logged
}

func (l *slogLogger) Noticef(format string, v ...any) { l.emit(slog.LevelInfo, format, v) }
func (l *slogLogger) Warnf(format string, v ...any)   { l.emit(slog.LevelWarn, format, v) }
func (l *slogLogger) Errorf(format string, v ...any)  { l.emit(slog.LevelError, format, v) }
func (l *slogLogger) Debugf(format string, v ...any)  { l.emit(slog.LevelDebug, format, v) }
func (l *slogLogger) Tracef(format string, v ...any)  { l.emit(levelTrace, format, v) }

// Fatalf logs at Error and does not exit: an embedded server must not end
// the process; Start reports the failure as an error.
func (l *slogLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg, "fatal", true)
	select {
	case l.fatal <- msg:
	default:
	}
}

func (l *slogLogger) emit(level slog.Level, format string, v []any) {
	if !l.log.Enabled(context.Background(), level) {
		return // skip the Sprintf of a line nobody reads
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...))
}
