// Package calibrate measures how well response confidence predicts
// correctness, from the labels users send to POST /v1/feedback
// ({"id": "<response id>", "correct": true}).
//
// A response's confidence is its geometric-mean token probability,
// exp(mean token logprob). A Store remembers the confidence of recent
// responses under their ids until a label arrives, and keeps the labelled
// (confidence, correct) pairs in a bounded ring. Compute turns the pairs into
// a Report: accuracy, expected and maximum calibration error over
// equal-width bins, the reliability bins themselves, and the temperature
// that best rescales the confidences.
//
// The definitions match scikit-learn's calibration_curve (strategy
// "uniform") for the bins and scipy's bounded minimize_scalar for the
// temperature; testdata/gen_golden.py produces the reference values the tests
// compare against.
package calibrate
