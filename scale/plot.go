package scale

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plot draws the growth curve as three panels over the record count (log
// scale, a tick at each point): create p99, List p99 and the API node's RSS
// above its empty start per record; a flat line
// in the first and last is a cost per record that does not grow with the
// fleet, and the List p99 should grow no faster than the records.
func (rep *Report) plot(path string) error {
	if len(rep.Growth) == 0 {
		return nil
	}
	panel := func(title, unit string, y func(Point) float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "records"
		p.X.Scale = plot.LogScale{}
		var ticks plot.ConstantTicks
		for _, g := range rep.Growth {
			ticks = append(ticks, plot.Tick{Value: float64(g.Records), Label: fmt.Sprint(g.Records)})
		}
		p.X.Tick.Marker = ticks
		p.Y.Label.Text = unit
		p.Y.Min = 0
		pts := make(plotter.XYs, len(rep.Growth))
		for i, g := range rep.Growth {
			pts[i].X, pts[i].Y = float64(g.Records), y(g)
		}
		if err := plotutil.AddLinePoints(p, pts); err != nil {
			return nil, err
		}
		return p, nil
	}
	specs := []struct {
		title, unit string
		y           func(Point) float64
	}{
		{"create p99", "ms", func(g Point) float64 { return float64(g.CreateP99.Microseconds()) / 1000 }},
		{"List p99 (every record, pages of 500)", "ms", func(g Point) float64 { return float64(g.ListP99.Microseconds()) / 1000 }},
		{"API node RSS above its empty start, per record", "KiB", rep.perRecordKiB},
	}
	plots := make([][]*plot.Plot, 1)
	for _, s := range specs {
		p, err := panel(s.title, s.unit, s.y)
		if err != nil {
			return err
		}
		plots[0] = append(plots[0], p)
	}
	img := vgimg.New(vg.Points(1200), vg.Points(400))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(specs), PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, dc)
	for j := range specs {
		plots[0][j].Draw(canvases[0][j])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
