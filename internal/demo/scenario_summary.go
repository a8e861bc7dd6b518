package demo

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
)

// printSummary prints the table of one telling: per fault, the signal that
// detected it and after how long from its injection, and the alert sent
// for it and whether the receiver got it; then the phases' notes and what
// else moved.
func printSummary(out io.Writer, res *storyResult) {
	what := "Summary"
	if res.interrupted {
		what = "Interrupted"
	}
	fmt.Fprintf(out, "\n%s: telling %d (%s in all; warm-up %s", what, res.n,
		fmtDuration(res.end.Sub(res.start).Round(time.Second)), fmtDuration(res.warmup.Round(time.Second)))
	if res.pinErr != nil {
		fmt.Fprintf(out, "; baseline NOT pinned: %v", res.pinErr)
	}
	if len(res.unknown) > 0 {
		fmt.Fprintf(out, "; still without a verdict after it: %s", strings.Join(res.unknown, ", "))
	}
	fmt.Fprintln(out, "):")
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "  injected fault\tdetected by\tafter\talert sent")
	fmt.Fprintln(tw, "  --------------\t-----------\t-----\t----------")
	for i := range res.phases {
		pr := &res.phases[i]
		for j, e := range pr.phase.expect {
			fault := ""
			if j == 0 {
				fault = pr.phase.label + " " + pr.phase.name
			}
			det, after := signalNames[e.signal]+": not detected", "—"
			switch {
			case pr.cut:
				det += " (phase cut short)"
			case slices.Contains(pr.carried, e.signal):
				det = signalNames[e.signal] + ": " + alarmStates[e.signal] + " already, before the fault"
			}
			if d := pr.seen[e.signal]; d >= 0 {
				det, after = signalNames[e.signal]+": "+alarmStates[e.signal], fmtSeconds(d)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", fault, det, after, res.alertCell(pr, e))
		}
	}
	if rec := res.recovery; !rec.start.IsZero() {
		settled := "—"
		det := "not all clear within the wait"
		if rec.settled >= 0 {
			settled, det = fmtSeconds(rec.settled), "all clear"
		}
		fmt.Fprintf(tw, "  recovery (all restored)\t%s\t%s\t%s\n", det, settled, resolutionCell(rec.resolved))
	}
	tw.Flush()
	var notes []string
	for i := range res.phases {
		pr := &res.phases[i]
		if pr.note != "" {
			notes = append(notes, pr.phase.label+" "+pr.note)
		}
		if also := pr.also(); also != "" {
			notes = append(notes, pr.phase.label+" also: "+also)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(out)
		for _, n := range notes {
			fmt.Fprintln(out, "  "+n)
		}
	}
}

// alertCell says which of e's alerts fired in the phase, after how long,
// what became of Vigil's notification and whether the receiver got it.
func (res *storyResult) alertCell(pr *phaseResult, e expectation) string {
	if len(e.alerts) == 0 {
		return "none expected"
	}
	fa := pr.firstAlert(e.alerts)
	if fa == nil && slices.Contains(pr.carried, e.signal) {
		return "none fired anew (" + strings.Join(e.alerts, " or ") + ": the signal was in alarm before)"
	}
	if fa == nil {
		return "none fired (" + strings.Join(e.alerts, " or ") + ")"
	}
	cell := fmt.Sprintf("%s%s after %.1f s", fa.name, labelNote(fa.labels), fa.after.Seconds())
	if fa.silenced {
		return cell + ", silenced (notified shortly before)"
	}
	// The notification is queued when the alert fires; it may show a
	// little before the poll that saw the state.
	from := fa.at.Add(-5 * time.Second)
	// A delivery that failed and was retried logs "retrying" first: a
	// later "sent" for the same alert is what happened to it.
	outcome := "not sent"
	for _, d := range res.deliveries {
		if d.Name == fa.name && !d.Resolved && !d.Time.Before(from) && alertKey(d.Labels) == alertKey(fa.labels) {
			if outcome == "not sent" || d.Outcome == alert.OutcomeSent {
				outcome = d.Outcome
			}
			if d.Outcome == alert.OutcomeSent {
				break
			}
		}
	}
	got := "receiver missed it"
	for _, r := range res.receipts {
		if r.name == fa.name && !r.resolved && !r.at.Before(from) && alertKey(r.labels) == alertKey(fa.labels) {
			got = "receiver got it"
			break
		}
	}
	if outcome == alert.OutcomeSent {
		outcome = "sent"
	}
	return cell + ": " + outcome + ", " + got
}

// resolutionCell says which resolutions the receiver got.
func resolutionCell(names []string) string {
	if len(names) == 0 {
		return "no resolution received"
	}
	uniq := slices.Compact(slices.Sorted(slices.Values(names)))
	return fmt.Sprintf("%d resolutions received (%s)", len(names), strings.Join(uniq, ", "))
}

// also lists what moved in the phase that it did not expect: other
// signals' alarms and other alerts.
func (pr *phaseResult) also() string {
	var parts []string
	if len(pr.carried) > 0 {
		names := make([]string, len(pr.carried))
		for i, k := range pr.carried {
			names[i] = signalNames[k]
		}
		parts = append(parts, "already in alarm when it began: "+strings.Join(names, ", "))
	}
	for k := range numSignals {
		if pr.seen[k] < 0 || pr.expects(k) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: %s after %.1f s", signalNames[k], alarmStates[k], pr.seen[k].Seconds()))
	}
	for _, fa := range pr.alerts {
		if slices.ContainsFunc(pr.phase.expect, func(e expectation) bool { return slices.Contains(e.alerts, fa.name) }) {
			continue
		}
		state := "fired"
		if fa.silenced {
			state = "silenced"
		}
		parts = append(parts, fmt.Sprintf("%s%s %s after %.1f s", fa.name, labelNote(fa.labels), state, fa.after.Seconds()))
	}
	return strings.Join(parts, "; ")
}

// fmtSeconds writes d in seconds with one decimal.
// Up to 999.9 s they align in a column.
func fmtSeconds(d time.Duration) string { return fmt.Sprintf("%5.1f s", d.Seconds()) }
