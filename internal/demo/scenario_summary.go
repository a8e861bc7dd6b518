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
		FormatDuration(res.end.Sub(res.start).Round(time.Second)), FormatDuration(res.warmup.Round(time.Second)))
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
		if c := pr.clear; !c.start.IsZero() {
			fmt.Fprintf(tw, "  (all clear before %s)\t%s\t%s\t%s\n", pr.phase.label, clearCell(c), settledCell(c), resolutionCell(c.resolved))
		}
		fault := pr.phase.label + " " + pr.phase.name
		for _, e := range pr.phase.expect {
			det, after := signalNames[e.Signal]+": not detected", "—"
			switch {
			case pr.cut:
				det += " (phase cut short)"
			case slices.Contains(pr.carried, e.Signal):
				det = signalNames[e.Signal] + ": " + alarmStates[e.Signal] + " already, before the fault"
			}
			if d := pr.SeenFor(e); d >= 0 {
				det, after = signalNames[e.Signal]+": "+alarmStates[e.Signal], FormatSeconds(d)
			}
			if e.Model != "" {
				det += " (" + e.Model + "'s own"
				if others := pr.OthersSeen(e); len(others) > 0 {
					det += "; also " + strings.Join(others, ", ")
				} else {
					det += "; no other model's"
				}
				det += ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", fault, det, after, res.alertCell(pr, e))
			fault = ""
		}
		for _, e := range pr.phase.calm {
			det, after, alerts := signalNames[e.Signal]+": no alarm, fleet-wide or per model (as it should)", "—",
				"none fired ("+strings.Join(e.Alerts, ", ")+"), as it should"
			sig, fired := pr.moved(e)
			if len(sig) > 0 {
				det, after = "MOVED, it should not: "+strings.Join(sig, "; "), FormatSeconds(pr.firstMoved(e))
			}
			if pr.cut {
				det += " (phase cut short)"
			}
			if len(fired) > 0 {
				alerts = "FIRED, it should not: " + strings.Join(fired, "; ")
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", fault, det, after, alerts)
			fault = ""
		}
	}
	if rec := res.recovery; !rec.start.IsZero() {
		fmt.Fprintf(tw, "  recovery (all restored)\t%s\t%s\t%s\n", clearCell(rec), settledCell(rec), resolutionCell(rec.resolved))
	}
	tw.Flush()
	var notes []string
	for i := range res.phases {
		pr := &res.phases[i]
		if pr.note != "" {
			notes = append(notes, pr.phase.label+" "+pr.note)
		}
		also, allowed := pr.also()
		if allowed != "" {
			notes = append(notes, pr.phase.label+" also, as it may ("+pr.phase.why+"): "+allowed)
		}
		if also != "" {
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

// clearCell and settledCell say whether and when a wait for all clear
// ended so.
func clearCell(r recoveryResult) string {
	if r.settled < 0 {
		return "not all clear within the wait"
	}
	return "all clear"
}

func settledCell(r recoveryResult) string {
	if r.settled < 0 {
		return "—"
	}
	return FormatSeconds(r.settled)
}

// firstMoved is when the first of what e must not move moved in the
// phase; negative: nothing did.
func (r *PhaseResult) firstMoved(e Expectation) time.Duration {
	first := r.Seen[e.Signal]
	for k, d := range r.SegSeen {
		if k.Signal == e.Signal && (first < 0 || d < first) {
			first = d
		}
	}
	return first
}

// alertCell says which of e's alerts fired in the phase, after how long,
// what became of Vigil's notification and whether the receiver got it.
func (res *storyResult) alertCell(pr *PhaseResult, e Expectation) string {
	if len(e.Alerts) == 0 {
		return "none expected"
	}
	fa := pr.FirstAlert(e)
	if fa == nil && slices.Contains(pr.carried, e.Signal) {
		return "none fired anew (" + strings.Join(e.Alerts, " or ") + ": the signal was in alarm before)"
	}
	if fa == nil {
		x := "none fired (" + strings.Join(e.Alerts, " or ")
		if e.Model != "" {
			x += " with model=" + e.Model
		}
		return x + ")"
	}
	cell := fmt.Sprintf("%s%s after %.1f s", fa.Name, labelNote(fa.Labels), fa.After.Seconds())
	if fa.Silenced {
		return cell + ", silenced (notified shortly before)"
	}
	// The notification is queued when the alert fires; it may show a
	// little before the poll that saw the state.
	from := fa.At.Add(-5 * time.Second)
	// A delivery that failed and was retried logs "retrying" first: a
	// later "sent" for the same alert is what happened to it.
	outcome := "not sent"
	for _, d := range res.deliveries {
		if d.Name == fa.Name && !d.Resolved && !d.Time.Before(from) && alertKey(d.Labels) == alertKey(fa.Labels) {
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
		if r.name == fa.Name && !r.resolved && !r.at.Before(from) && alertKey(r.labels) == alertKey(fa.Labels) {
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

// also lists what moved in the phase that it did not expect, and that
// its calm rows do not tell: other signals' alarms and other alerts; the
// phase's allowed consequences apart.
func (pr *PhaseResult) also() (also, allowed string) {
	var parts, ok []string
	if len(pr.carried) > 0 {
		names := make([]string, len(pr.carried))
		for i, k := range pr.carried {
			names[i] = signalNames[k]
		}
		parts = append(parts, "already in alarm when it began: "+strings.Join(names, ", "))
	}
	calm := func(k Signal) bool {
		return slices.ContainsFunc(pr.phase.calm, func(e Expectation) bool { return e.Signal == k })
	}
	for k := range numSignals {
		if pr.Seen[k] < 0 || pr.expects(k) || calm(k) {
			continue
		}
		x := fmt.Sprintf("%s: %s after %.1f s", signalNames[k], alarmStates[k], pr.Seen[k].Seconds())
		if slices.Contains(pr.phase.allowed, k) {
			ok = append(ok, x)
		} else {
			parts = append(parts, x)
		}
	}
	for _, fa := range pr.Alerts {
		named := func(e Expectation) bool { return slices.Contains(e.Alerts, fa.Name) }
		if slices.ContainsFunc(pr.phase.expect, func(e Expectation) bool { return e.Matches(fa) }) || slices.ContainsFunc(pr.phase.calm, named) {
			continue
		}
		state := "fired"
		if fa.Silenced {
			state = "silenced"
		}
		x := fmt.Sprintf("%s%s %s after %.1f s", fa.Name, labelNote(fa.Labels), state, fa.After.Seconds())
		if slices.Contains(pr.phase.allowedAlerts, fa.Name) {
			ok = append(ok, x)
		} else {
			parts = append(parts, x)
		}
	}
	return strings.Join(parts, "; "), strings.Join(ok, "; ")
}

// FormatSeconds writes d in seconds with one decimal.
// Up to 999.9 s they align in a column.
func FormatSeconds(d time.Duration) string { return fmt.Sprintf("%5.1f s", d.Seconds()) }
