package stats

import "math/bits"

// numpyArgsort returns the permutation that numpy.argsort(v) (kind
// 'quicksort', numpy 1.24) returns: an introsort over indices with
// median-of-three partitioning, insertion sort below 16 elements and a
// heapsort fallback. It is not stable, and scikit-learn's MCD lets its order
// decide between observations tied at the support boundary, so reproducing
// it, rather than using any correct sort, is what makes tied data give
// scikit-learn's support. Ported from numpy/core/src/npysort/quicksort.cpp
// (aquicksort_) and npysort_heapsort.h (aheapsort_); NaN sorts last.
func numpyArgsort(v []float64) []int {
	const smallQuicksort = 15
	num := len(v)
	tosort := make([]int, num)
	for i := range tosort {
		tosort[i] = i
	}
	if num < 2 {
		return tosort
	}
	less := func(a, b float64) bool { return a < b || (b != b && a == a) }
	var stack [2 * 64]int
	var depth [2 * 64]int
	sp, dp := 0, 0
	pl, pr := 0, num-1
	cdepth := (bits.Len(uint(num)) - 1) * 2 // npy_get_msb(num) * 2
	for {
		if cdepth < 0 {
			numpyAHeapsort(v, tosort[pl:pr+1], less)
		} else {
			for pr-pl > smallQuicksort {
				pm := pl + (pr-pl)>>1
				if less(v[tosort[pm]], v[tosort[pl]]) {
					tosort[pm], tosort[pl] = tosort[pl], tosort[pm]
				}
				if less(v[tosort[pr]], v[tosort[pm]]) {
					tosort[pr], tosort[pm] = tosort[pm], tosort[pr]
				}
				if less(v[tosort[pm]], v[tosort[pl]]) {
					tosort[pm], tosort[pl] = tosort[pl], tosort[pm]
				}
				vp := v[tosort[pm]]
				pi, pj := pl, pr-1
				tosort[pm], tosort[pj] = tosort[pj], tosort[pm]
				for {
					pi++
					for less(v[tosort[pi]], vp) {
						pi++
					}
					pj--
					for less(vp, v[tosort[pj]]) {
						pj--
					}
					if pi >= pj {
						break
					}
					tosort[pi], tosort[pj] = tosort[pj], tosort[pi]
				}
				pk := pr - 1
				tosort[pi], tosort[pk] = tosort[pk], tosort[pi]
				// Push the larger partition, iterate on the smaller.
				if pi-pl < pr-pi {
					stack[sp], stack[sp+1] = pi+1, pr
					pr = pi - 1
				} else {
					stack[sp], stack[sp+1] = pl, pi-1
					pl = pi + 1
				}
				sp += 2
				cdepth--
				depth[dp] = cdepth
				dp++
			}
			// Insertion sort.
			for pi := pl + 1; pi <= pr; pi++ {
				vi := tosort[pi]
				vp := v[vi]
				pj := pi
				for pj > pl && less(vp, v[tosort[pj-1]]) {
					tosort[pj] = tosort[pj-1]
					pj--
				}
				tosort[pj] = vi
			}
		}
		if sp == 0 {
			break
		}
		sp -= 2
		pl, pr = stack[sp], stack[sp+1]
		dp--
		cdepth = depth[dp]
	}
	return tosort
}

// numpyAHeapsort is numpy's aheapsort_ on the index slice s (1-based heap
// indexing as in the C code).
func numpyAHeapsort(v []float64, s []int, less func(a, b float64) bool) {
	n := len(s)
	a := func(i int) *int { return &s[i-1] }
	for l := n >> 1; l > 0; l-- {
		tmp := *a(l)
		i, j := l, l<<1
		for j <= n {
			if j < n && less(v[*a(j)], v[*a(j + 1)]) {
				j++
			}
			if !less(v[tmp], v[*a(j)]) {
				break
			}
			*a(i) = *a(j)
			i = j
			j += j
		}
		*a(i) = tmp
	}
	for n > 1 {
		tmp := *a(n)
		*a(n) = *a(1)
		n--
		i, j := 1, 2
		for j <= n {
			if j < n && less(v[*a(j)], v[*a(j + 1)]) {
				j++
			}
			if !less(v[tmp], v[*a(j)]) {
				break
			}
			*a(i) = *a(j)
			i = j
			j += j
		}
		*a(i) = tmp
	}
}
