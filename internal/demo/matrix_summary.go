package demo

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// matrixColumns are the matrix's signal columns, in order.
var matrixColumns = []signalKind{sigDrift, sigDecay, sigOutput, sigLatency, sigPrecision, sigEjection, sigSlow, sigStore, sigSpans}

// columnNames are the columns' headings.
var columnNames = map[signalKind]string{
	sigDrift: "input drift", sigDecay: "confidence", sigOutput: "output drift", sigLatency: "latency",
	sigPrecision: "precision", sigEjection: "backend out", sigSlow: "backend slow", sigStore: "store down", sigSpans: "spans dropped",
}

// expectsSignal reports whether r's diagonal holds k.
func (r *matrixRow) expectsSignal(k signalKind) bool {
	return slices.ContainsFunc(r.expect, func(e expectation) bool { return e.signal == k })
}

// expectsAlert reports whether name is one of r's diagonal alerts, for
// any model.
func (r *matrixRow) expectsAlert(name string) bool {
	return slices.ContainsFunc(r.expect, func(e expectation) bool { return slices.Contains(e.alerts, name) })
}

// diagonal reports whether fa is one of r's diagonal alerts: one of an
// expectation's names, with its model's label when it names a model.
func (r *matrixRow) diagonal(fa firedAlert) bool {
	return slices.ContainsFunc(r.expect, func(e expectation) bool { return e.matches(fa) })
}

// failures lists what rr got wrong: a diagonal signal or alert missing or
// late, a signal or alert off the diagonal that is not an allowed
// consequence. A skipped row has none.
func (rr *rowResult) failures() []string {
	if rr.skipped != "" {
		return nil
	}
	r, pr := rr.row, &rr.phase
	var out []string
	if rr.err != nil {
		out = append(out, rr.err.Error())
	}
	for _, e := range r.expect {
		name := signalNames[e.signal]
		if e.model != "" {
			name = "model " + e.model + "'s " + name
		}
		switch d := pr.seenFor(e); {
		case d < 0:
			out = append(out, fmt.Sprintf("%s did not leave ok", name))
		case d > r.deadline:
			out = append(out, fmt.Sprintf("%s after %s, past its deadline %s", name, fmtSeconds(d), fmtDuration(r.deadline)))
		}
		// A fault confined to one model moves no other model's segment.
		for _, m := range pr.othersSeen(e) {
			out = append(out, fmt.Sprintf("off the diagonal: model %s's %s %s after %s", m, signalNames[e.signal],
				alarmStates[e.signal], fmtSeconds(pr.segSeen[segKey{m, e.signal}])))
		}
		if len(e.alerts) == 0 {
			continue
		}
		want := strings.Join(e.alerts, " or ")
		if e.model != "" {
			want += " with model=" + e.model
		}
		switch fa := pr.firstAlert(e); {
		case fa == nil:
			out = append(out, fmt.Sprintf("no %s fired", want))
		case fa.after > r.alertDeadline:
			out = append(out, fmt.Sprintf("%s after %s, past its deadline %s", fa.name, fmtSeconds(fa.after), fmtDuration(r.alertDeadline)))
		}
	}
	for _, k := range matrixColumns {
		if pr.seen[k] >= 0 && !r.expectsSignal(k) && !slices.Contains(r.allowed, k) {
			out = append(out, fmt.Sprintf("off the diagonal: %s %s after %s", signalNames[k], alarmStates[k], fmtSeconds(pr.seen[k])))
		}
	}
	for _, fa := range pr.alerts {
		if !r.diagonal(fa) && !slices.Contains(r.allowedAlerts, fa.name) {
			out = append(out, fmt.Sprintf("off the diagonal: alert %s%s after %s", fa.name, labelNote(fa.labels), fmtSeconds(fa.after)))
		}
	}
	return out
}

// matrixFailures lists every failure of every seed's rows, each line
// naming its seed and row.
func matrixFailures(results []*matrixResult) []string {
	var out []string
	for _, res := range results {
		if res.pinErr != nil {
			out = append(out, fmt.Sprintf("seed %d: baseline not pinned: %v", res.seed, res.pinErr))
		}
		for i := range res.rows {
			for _, f := range res.rows[i].failures() {
				out = append(out, fmt.Sprintf("seed %d, %s: %s", res.seed, res.rows[i].row.name, f))
			}
		}
	}
	return out
}

// printMatrix writes the matrix as markdown: a row per fault, a column per
// signal (the time it left ok with each seed; bold on the diagonal,
// "allowed" for a documented consequence, ✗ for anything else), the
// alerts that fired, the client errors, and a verdict; then the notes.
func printMatrix(out io.Writer, rows []matrixRow, results []*matrixResult) {
	seeds := make([]string, len(results))
	for i, r := range results {
		seeds[i] = fmt.Sprint(r.seed)
	}
	fmt.Fprintf(out, "Times are seconds from the injection, one per seed (%s); – : stayed ok / did not fire.\n\n", strings.Join(seeds, ", "))
	fmt.Fprint(out, "| fault |")
	for _, k := range matrixColumns {
		fmt.Fprintf(out, " %s |", columnNames[k])
	}
	fmt.Fprintln(out, " alerts fired | client errors | verdict |")
	fmt.Fprint(out, "|---|")
	for range matrixColumns {
		fmt.Fprint(out, "---|")
	}
	fmt.Fprintln(out, "---|---|---|")
	var notes []string
	for i := range rows {
		r := &rows[i]
		byseed := make([]*rowResult, len(results))
		skipped := ""
		for j, res := range results {
			for k := range res.rows {
				if res.rows[k].row.name == r.name {
					byseed[j] = &res.rows[k]
					if res.rows[k].skipped != "" {
						skipped = res.rows[k].skipped
					}
				}
			}
		}
		deadline := ""
		switch {
		case len(r.expect) > 0:
			deadline = fmt.Sprintf(" (≤ %s)", fmtDuration(r.deadline))
		case r.calm != "":
			deadline = fmt.Sprintf(" (watched %s)", fmtDuration(r.deadline))
		}
		fmt.Fprintf(out, "| %s%s |", r.name, deadline)
		if skipped != "" {
			for range matrixColumns {
				fmt.Fprint(out, " |")
			}
			fmt.Fprintf(out, " | | skipped: %s |\n", skipped)
			continue
		}
		for _, k := range matrixColumns {
			fmt.Fprintf(out, " %s |", signalCell(r, k, byseed))
		}
		fmt.Fprintf(out, " %s |", alertsCell(r, byseed))
		var sent, failed int64
		var fails []string
		for _, rr := range byseed {
			if rr == nil {
				continue
			}
			sent, failed = sent+rr.sent, failed+rr.errors
			fails = append(fails, rr.failures()...)
			if rr.note != "" {
				notes = append(notes, fmt.Sprintf("%s, seed %d: %s", r.name, rr.seed, rr.note))
			}
			if len(rr.dirty) > 0 {
				notes = append(notes, fmt.Sprintf("%s, seed %d: began before everything was back to ok: %s", r.name, rr.seed, strings.Join(rr.dirty, ", ")))
			}
		}
		verdict := "pass"
		if len(fails) > 0 {
			verdict = fmt.Sprintf("**FAIL** (%d)", len(fails))
		}
		fmt.Fprintf(out, " %d of %d | %s |\n", failed, sent, verdict)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Bold: the diagonal (the fault's own signal); (…) allowed: a documented consequence; ✗: off the diagonal and not allowed.")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Allowed consequences, gaps and calm rows:")
	for i := range rows {
		r := &rows[i]
		if r.why != "" {
			fmt.Fprintf(out, "- %s: may also move %s: %s.\n", r.name, allowedNames(r), r.why)
		}
		if r.gap != "" {
			fmt.Fprintf(out, "- %s: gap: %s.\n", r.name, r.gap)
		}
		if r.calm != "" {
			fmt.Fprintf(out, "- %s: nothing else may move: %s.\n", r.name, r.calm)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "Notes:")
		for _, n := range notes {
			fmt.Fprintln(out, "- "+n)
		}
	}
	if f := matrixFailures(results); len(f) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "Failures:")
		for _, x := range f {
			fmt.Fprintln(out, "- "+x)
		}
	}
}

// allowedNames lists r's allowed signals and alerts.
func allowedNames(r *matrixRow) string {
	var xs []string
	for _, k := range r.allowed {
		xs = append(xs, signalNames[k])
	}
	if len(r.allowedAlerts) > 0 {
		xs = append(xs, "alerts "+strings.Join(r.allowedAlerts, ", "))
	}
	return strings.Join(xs, "; ")
}

// signalCell is one row's times for signal k, one per seed.
func signalCell(r *matrixRow, k signalKind, byseed []*rowResult) string {
	var ts []string
	moved := false
	for _, rr := range byseed {
		if rr == nil || rr.skipped != "" {
			ts = append(ts, "?")
			continue
		}
		d := rr.phase.seen[k]
		for _, e := range r.expect {
			if e.signal == k && e.model != "" {
				d = rr.phase.seenFor(e) // the model's own segment
			}
		}
		if d < 0 {
			ts = append(ts, "–")
			continue
		}
		moved = true
		ts = append(ts, fmt.Sprintf("%.1f", d.Seconds()))
	}
	cell := strings.Join(ts, " / ")
	switch {
	case r.expectsSignal(k):
		return "**" + cell + "**"
	case !moved:
		return "–"
	case slices.Contains(r.allowed, k):
		return "(" + cell + ") allowed"
	}
	return "✗ " + cell
}

// alertsCell lists the alerts that fired in the row, each with its times
// per seed.
func alertsCell(r *matrixRow, byseed []*rowResult) string {
	var names []string
	diagonal := map[string]bool{} // by name and labels
	for _, rr := range byseed {
		if rr == nil {
			continue
		}
		for _, fa := range rr.phase.alerts {
			n := fa.name + labelNote(fa.labels)
			if !slices.Contains(names, n) {
				names = append(names, n)
				diagonal[n] = r.diagonal(fa)
			}
		}
	}
	if len(names) == 0 {
		return "–"
	}
	var parts []string
	for _, n := range names {
		var ts []string
		name := n
		for _, rr := range byseed {
			t := "–"
			if rr != nil {
				for _, fa := range rr.phase.alerts {
					if fa.name+labelNote(fa.labels) == n {
						t = fmt.Sprintf("%.1f", fa.after.Seconds())
						if fa.silenced {
							t += " (silenced)"
						}
						name = fa.name
						break
					}
				}
			}
			ts = append(ts, t)
		}
		mark := ""
		switch {
		case diagonal[n]:
			n = "**" + n + "**"
		case slices.Contains(r.allowedAlerts, name):
			mark = " allowed"
		default:
			mark = " ✗"
		}
		parts = append(parts, fmt.Sprintf("%s %s%s", n, strings.Join(ts, " / "), mark))
	}
	return strings.Join(parts, "; ")
}
