package loadtest

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The report: six panels over the run's time axis, from the 1 Hz samples.

var (
	colBlue   = color.RGBA{31, 119, 180, 255}
	colOrange = color.RGBA{255, 127, 14, 255}
	colGreen  = color.RGBA{44, 160, 44, 255}
	colRed    = color.RGBA{214, 39, 40, 255}
	colPurple = color.RGBA{148, 103, 189, 255}
	colGrey   = color.RGBA{127, 127, 127, 255}
)

// series is one line of a panel: y values over the samples' x values; NaN
// leaves a gap.
type series struct {
	name   string
	col    color.Color
	dashed bool
	y      []float64
}

// timeAxis picks a unit for the x axis that keeps tick labels short.
func timeAxis(total float64) (string, float64) {
	switch {
	case total > 3*3600:
		return "hours", 3600
	case total > 600:
		return "minutes", 60
	default:
		return "seconds", 1
	}
}

func writeReport(path string, res *Result, samples []sample) error {
	if len(samples) == 0 {
		return nil
	}
	unitName, unit := timeAxis(samples[len(samples)-1].At)
	xs := make([]float64, len(samples))
	col := func(get func(*sample) float64) []float64 {
		out := make([]float64, len(samples))
		for i := range samples {
			out[i] = get(&samples[i])
		}
		return out
	}
	perSec := func(get func(*Counts) int64) []float64 {
		out := make([]float64, len(samples))
		prev := 0.0
		for i := range samples {
			dt := samples[i].At - prev
			prev = samples[i].At
			if dt < 0.2 { // a last, partial tick too short to be a rate
				out[i] = math.NaN()
				continue
			}
			out[i] = float64(get(&samples[i].Counts)) / dt
		}
		return out
	}
	for i := range samples {
		xs[i] = samples[i].At / unit
	}
	lat := func(get func(*Percentiles) float64) []float64 {
		return col(func(s *sample) float64 {
			if s.Latency.Count == 0 {
				return math.NaN()
			}
			return get(&s.Latency)
		})
	}

	xLabel := "time since start (" + unitName + ")"
	panels := [][]*plot.Plot{
		{
			panel("Throughput (msg/s)", xLabel, xs, false,
				series{"offered", colGrey, true, perSec(func(c *Counts) int64 { return c.Offered })},
				series{"pushed", colBlue, false, perSec(func(c *Counts) int64 { return c.Pushed })},
				series{"popped", colOrange, false, perSec(func(c *Counts) int64 { return c.Popped })}),
			panel("End-to-end latency (ms, per second, log scale)", xLabel, xs, true,
				series{"p50", colGreen, false, lat(func(p *Percentiles) float64 { return p.P50 })},
				series{"p99", colOrange, false, lat(func(p *Percentiles) float64 { return p.P99 })},
				series{"p99.9", colRed, false, lat(func(p *Percentiles) float64 { return p.P999 })}),
		},
		{
			panel("Broker resident memory (MB)", xLabel, xs, false,
				series{"rss", colPurple, false, col(func(s *sample) float64 { return s.Res.BrokerRSS })}),
			panel("CPU (cores)", xLabel, xs, false,
				series{"broker", colBlue, false, col(func(s *sample) float64 { return s.Res.BrokerCPU })},
				series{"PostgreSQL", colOrange, false, col(func(s *sample) float64 { return s.Res.PGCPU })},
				series{"loader", colGrey, true, col(func(s *sample) float64 { return s.Res.LoaderCPU })}),
		},
		{
			nil, // commits and WAL: two stacked plots, drawn below
			panel("Database size (MB)", xLabel, xs, false,
				series{"size", colBlue, false, col(func(s *sample) float64 { return s.Res.DBSize })}),
		},
	}
	commits := panel("PostgreSQL commits and WAL syncs (per second)", "", xs, false,
		series{"commits", colBlue, false, col(func(s *sample) float64 { return s.Res.Commits })},
		series{"WAL syncs", colOrange, false, col(func(s *sample) float64 { return s.Res.WALSyncs })})
	wal := panel("WAL written (MB/s)", xLabel, xs, false,
		series{"WAL", colGreen, false, col(func(s *sample) float64 { return s.Res.WALBytes })})

	const w, h = 16 * vg.Inch, 13.5 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(100), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)

	// Title lines across the top.
	titleH := vg.Length(0.7) * vg.Inch
	title := fmt.Sprintf("comb loadtest — %s, %s, %d msg/s offered, push batch %d, %d partitions, %d consumers, payload %d B, %.0f s",
		res.Label, res.Settings.Mode, res.Settings.Rate, res.Settings.PushBatch, res.Settings.Partitions,
		res.Settings.Consumers, res.Settings.Payload, res.Elapsed)
	if res.Settings.Mode == ModeClosed {
		title = fmt.Sprintf("comb loadtest — %s, closed loop, %d pacers, push batch %d, %d partitions, %d consumers, payload %d B, %.0f s",
			res.Label, res.Settings.Pacers, res.Settings.PushBatch, res.Settings.Partitions,
			res.Settings.Consumers, res.Settings.Payload, res.Elapsed)
	}
	sub := fmt.Sprintf("pushed %.0f msg/s, popped %.0f msg/s, shed %d | e2e p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms | started %s",
		res.PushRate, res.PopRate, res.Counts.Shed, res.Latency.P50, res.Latency.P99, res.Latency.P999,
		res.Start.UTC().Format("2006-01-02 15:04:05 UTC"))
	if res.Verdict.Checked {
		sub += fmt.Sprintf(" | verify: missing %d, order violations %d, duplicates %d",
			res.Verdict.Missing, res.Verdict.OrderViolations, res.Verdict.Duplicates)
	}
	drawText(dc, title, 15, dc.Min.X+w/2, dc.Max.Y-0.28*vg.Inch)
	drawText(dc, sub, 11, dc.Min.X+w/2, dc.Max.Y-0.55*vg.Inch)

	body := draw.Crop(dc, 0, 0, 0, -titleH)
	tiles := draw.Tiles{
		Rows: 3, Cols: 2,
		PadX: 0.35 * vg.Inch, PadY: 0.3 * vg.Inch,
		PadTop: 0.1 * vg.Inch, PadBottom: 0.15 * vg.Inch,
		PadLeft: 0.2 * vg.Inch, PadRight: 0.3 * vg.Inch,
	}
	canvases := plot.Align(panels, tiles, body)
	for r := range panels {
		for c, p := range panels[r] {
			if p != nil {
				p.Draw(canvases[r][c])
			}
		}
	}
	// The commits and WAL tile holds two plots, one above the other.
	stack := plot.Align([][]*plot.Plot{{commits}, {wal}}, draw.Tiles{Rows: 2, Cols: 1, PadY: 0.15 * vg.Inch}, canvases[2][0])
	commits.Draw(stack[0][0])
	wal.Draw(stack[1][0])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func drawText(dc draw.Canvas, s string, size vg.Length, x, y vg.Length) {
	sty := draw.TextStyle{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, size),
		XAlign:  draw.XCenter,
		YAlign:  draw.YCenter,
		Handler: plot.DefaultTextHandler,
	}
	dc.FillText(sty, vg.Point{X: x, Y: y}, s)
}

// panel makes one plot; series that hold no value leave it empty with a
// note in its title.
func panel(title, xLabel string, xs []float64, logY bool, ss ...series) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = 13
	p.X.Label.Text = xLabel
	p.X.Min = 0
	if len(xs) > 0 {
		p.X.Max = math.Max(xs[len(xs)-1], 1e-9)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = 12
	p.Add(plotter.NewGrid())
	any := false
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range ss {
		var first *plotter.Line
		for _, seg := range segments(xs, s.y, logY) {
			l, err := plotter.NewLine(seg)
			if err != nil {
				continue
			}
			l.Color = s.col
			l.Width = vg.Points(1.4)
			if s.dashed {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			}
			p.Add(l)
			if first == nil {
				first = l
			}
			for _, pt := range seg {
				lo, hi = math.Min(lo, pt.Y), math.Max(hi, pt.Y)
			}
		}
		if first != nil {
			p.Legend.Add(s.name, first)
			any = true
		}
	}
	if !any {
		p.Title.Text = title + " — not sampled"
		p.Y.Min, p.Y.Max = 0, 1
		return p
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
		p.Y.Max = math.Pow(10, math.Ceil(math.Log10(hi)+0.05))
	} else {
		p.Y.Min = 0
		// Head room for the legend in the top left corner.
		p.Y.Max = math.Max(hi*1.25, 1e-9)
	}
	return p
}

// segments splits a series at its NaN values (and, on a log axis, at
// values that are not positive).
func segments(xs, ys []float64, logY bool) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i, y := range ys {
		if math.IsNaN(y) || math.IsInf(y, 0) || (logY && y <= 0) {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: xs[i], Y: y})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
