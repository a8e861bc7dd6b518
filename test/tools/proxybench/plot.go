package main

import (
	"fmt"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plot draws results.png: four bar charts, max throughput of every
// target, then for the proxies the added p99 at each fixed rate, CPU per
// request and the streaming added TTFT.
func (r *results) plot(path string) error {
	proxies := []string{nginx, goProxy, fastProxyName, vigilMin, vigilFull}
	values := func(names []string, f func(targetSummary) float64) plotter.Values {
		var v plotter.Values
		for _, n := range names {
			v = append(v, f(r.target(n)))
		}
		return v
	}
	bars := func(title, ylabel string, names []string, series []plotter.Values, legend []string) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		if err := addBars(p, 60, series, legend); err != nil {
			return nil, err
		}
		p.Legend.Top, p.Legend.Left = true, true
		p.NominalX(names...)
		p.Y.Tick.Marker = plainTicks{}
		p.Y.Max += (p.Y.Max - p.Y.Min) * 0.15 // room for the legend
		p.Add(plotter.NewGrid())
		return p, nil
	}

	rps, err := bars("max throughput (wrk, closed loop)", "req/s", targetNames,
		[]plotter.Values{values(targetNames, func(t targetSummary) float64 { return t.MaxRPS })}, nil)
	if err != nil {
		return err
	}
	var p99 []plotter.Values
	var legend []string
	for i, rate := range r.Settings.Rates {
		p99 = append(p99, values(proxies, func(t targetSummary) float64 { return t.Rates[i].AddedP99Ms }))
		legend = append(legend, fmt.Sprintf("%d req/s", rate))
	}
	lat, err := bars("added p99 latency vs direct", "ms", proxies, p99, legend)
	if err != nil {
		return err
	}
	top := r.Settings.Rates[len(r.Settings.Rates)-1]
	cpu, err := bars(fmt.Sprintf("CPU per request at %d req/s", top), "µs", proxies,
		[]plotter.Values{values(proxies, func(t targetSummary) float64 { return t.CPUUsPerReq })}, nil)
	if err != nil {
		return err
	}
	ttft, err := bars("stream: added TTFT p50 vs direct", "ms", proxies,
		[]plotter.Values{values(proxies, func(t targetSummary) float64 { return t.StreamAddedTTFTMs })}, nil)
	if err != nil {
		return err
	}
	return writeGrid(path, 20*vg.Centimeter, [][]*plot.Plot{{rps, lat}, {cpu, ttft}})
}

// addBars adds one bar per value of each series, the series side by
// side within a group of total points' width, in plotutil's colours,
// each named in the legend by legend[i] (nil: no legend). A nil series
// keeps its place and colour empty, so that a name has the same colour
// in every chart of a report.
func addBars(p *plot.Plot, total float64, series []plotter.Values, legend []string) error {
	w := vg.Points(total / float64(len(series)))
	for i, s := range series {
		if s == nil {
			continue
		}
		b, err := plotter.NewBarChart(s, w)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(b)
		if legend != nil {
			p.Legend.Add(legend[i], b)
		}
	}
	return nil
}

// writeGrid draws plots in rows and columns on a PNG 30 cm wide and
// height high, at path.
func writeGrid(path string, height vg.Length, plots [][]*plot.Plot) error {
	img := vgimg.NewWith(vgimg.UseWH(30*vg.Centimeter, height), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	canvases := plot.Align(plots, tiles, dc)
	for j := range plots {
		for i := range plots[j] {
			plots[j][i].Draw(canvases[j][i])
		}
	}
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

// plainTicks are plot.DefaultTicks labelled without trailing zeros
// (25000, not 25000.00).
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}
