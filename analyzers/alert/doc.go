// Package alert turns Vigil's signals into alerts: adaptive thresholds
// over a bounded history of period values, consecutive breaches, silence
// after a notification, resolution, and delivery to Alertmanager's v2 API
// or a JSON webhook by one replica at a time.
//
// Once per period (default 5 minutes) the caller hands Engine.ObserveValues
// one value per rule and label set (Values maps the gateway-wide signals of
// an analyzers evaluation to them; the pipeline adds one error rate per
// backend and one precision divergence per compared backend). For each
// such series the engine
//
//   - computes the threshold: Config.Fixed[rule] (or DefaultFixed[rule])
//     when set, else the adaptive P·F where P is the Config.Percentile of
//     the series' past period values (up to Config.History of them, by
//     linear interpolation, see Percentile) and F is Config.Factor. An
//     adaptive threshold needs Config.MinHistory (alerts.min_history)
//     past periods: until then the series records values but never
//     breaches. For a negative P the factor widens the threshold upwards
//     too (P + |P|·(F−1)), and Config.Floor (DefaultFloor) bounds it from
//     below for signals that hover around zero;
//   - records the value in the history, persisted through Store so that it
//     survives restarts and is shared by replicas (a period recorded by
//     one replica is not recorded again by another);
//   - counts consecutive breaching periods (value > threshold and, for a
//     proportion with Value.N trials, significantly so under a binomial at
//     the threshold): 1 to Consecutive−1 is pending (DefaultConsecutive
//     sets the perplexity band's to 1); the Consecutive-th fires and notifies,
//     unless a notification for the same label set went out less than
//     Config.Silence ago (silenced: notified once the silence is over).
//     A firing alert is re-sent every Silence while it lasts;
//   - when a firing or silenced series is back inside its threshold, it is
//     resolved, with a resolution (EndsAt = now) if it had notified.
//
// Breaching values enter the history like any other, so a lasting change
// of level becomes the new normal after about (1−Percentile)·History.
//
// Only the holder of the Leader lease sends; the others evaluate the same
// rules and keep the same state, so that a replica that takes the lease
// over neither repeats nor forgets an alert.
package alert
