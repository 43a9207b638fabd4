package autoscale

import "math"

// Model predicts the job's throughput at a world size from the trusted
// measurements. With one size m measured at T(m) it assumes that each added
// node adds AssumedEfficiency of a node's share (T(n) = T(m)·(1 +
// E·(n-m)/m) above m; below m every removed node takes its whole share:
// the conservative direction both ways). With two or more sizes it fits the
// time per sample t(n) = 1/T(n) = a + b/n + c·n with a, b, c >= 0 by
// least squares on relative errors: b/n is the work that divides among the
// nodes, a the part that does not (a fixed global batch's communication,
// the input pipeline), c·n what grows with the world (all-reduce latency,
// stragglers): Amdahl's law plus a communication term. The non-negative
// fit is exact (every subset of the three terms is solved and the best
// non-negative one kept); c is fitted only from three sizes on. Above the
// largest measured size M the prediction never exceeds linear scaling from
// M.
type Model struct {
	single    bool
	m         int
	tm        float64 // throughput at m (single), or at the largest size (fit)
	eff       float64
	a, b, c   float64
	sizes     int
	residual  float64
	largest   int
	predicted bool
}

// Fit returns the model of the trusted measurements (ok false with none).
// Untrusted measurements are left out.
func Fit(measured []Measured, assumedEfficiency float64) (Model, bool) {
	var pts []Measured
	for _, m := range measured {
		if m.Trusted && m.Size > 0 && m.Throughput > 0 && !math.IsInf(m.Throughput, 0) && !math.IsNaN(m.Throughput) {
			pts = append(pts, m)
		}
	}
	if len(pts) == 0 {
		return Model{}, false
	}
	largest := pts[0]
	for _, p := range pts {
		if p.Size > largest.Size {
			largest = p
		}
	}
	if len(pts) == 1 {
		return Model{single: true, m: pts[0].Size, tm: pts[0].Throughput, eff: assumedEfficiency, sizes: 1, largest: largest.Size, predicted: true}, true
	}
	best := Model{residual: math.Inf(1)}
	for mask := 1; mask < 8; mask++ {
		if mask&4 != 0 && len(pts) < 3 {
			continue // c only from three sizes on
		}
		coef, res, ok := solveSubset(pts, mask)
		if !ok || res >= best.residual {
			continue
		}
		best = Model{a: coef[0], b: coef[1], c: coef[2], residual: res}
	}
	if math.IsInf(best.residual, 1) {
		return Model{}, false
	}
	best.sizes, best.largest, best.tm, best.predicted = len(pts), largest.Size, largest.Throughput, true
	return best, true
}

// basis is the fit's terms at n: 1, 1/n, n.
func basis(n int) [3]float64 { return [3]float64{1, 1 / float64(n), float64(n)} }

// solveSubset fits the terms in mask (bit 0: a, 1: b, 2: c) by weighted
// least squares (weight 1/t: relative errors). ok is false when the system
// is singular or a coefficient comes out negative.
func solveSubset(pts []Measured, mask int) ([3]float64, float64, bool) {
	var idx []int
	for j := range 3 {
		if mask&(1<<j) != 0 {
			idx = append(idx, j)
		}
	}
	k := len(idx)
	var ata [3][4]float64 // augmented normal equations
	for _, p := range pts {
		t := 1 / p.Throughput
		phi := basis(p.Size)
		for r := range k {
			for c := range k {
				ata[r][c] += phi[idx[r]] * phi[idx[c]] / (t * t)
			}
			ata[r][k] += phi[idx[r]] * t / (t * t)
		}
	}
	x, ok := gauss(ata, k)
	if !ok {
		return [3]float64{}, 0, false
	}
	var coef [3]float64
	for r := range k {
		if x[r] < 0 || math.IsNaN(x[r]) || math.IsInf(x[r], 0) {
			return [3]float64{}, 0, false
		}
		coef[idx[r]] = x[r]
	}
	var res float64
	for _, p := range pts {
		t := 1 / p.Throughput
		phi := basis(p.Size)
		f := coef[0]*phi[0] + coef[1]*phi[1] + coef[2]*phi[2]
		res += (f - t) * (f - t) / (t * t)
	}
	return coef, res, true
}

// gauss solves the k×k augmented system m by elimination with partial
// pivoting.
func gauss(m [3][4]float64, k int) ([3]float64, bool) {
	var x [3]float64
	for col := range k {
		p := col
		for r := col + 1; r < k; r++ {
			if math.Abs(m[r][col]) > math.Abs(m[p][col]) {
				p = r
			}
		}
		if math.Abs(m[p][col]) < 1e-300 {
			return x, false
		}
		m[col], m[p] = m[p], m[col]
		for r := col + 1; r < k; r++ {
			f := m[r][col] / m[col][col]
			for c := col; c <= k; c++ {
				m[r][c] -= f * m[col][c]
			}
		}
	}
	for r := k - 1; r >= 0; r-- {
		s := m[r][k]
		for c := r + 1; c < k; c++ {
			s -= m[r][c] * x[c]
		}
		x[r] = s / m[r][r]
	}
	return x, true
}

// Predict returns the predicted throughput at n nodes (0 for n < 1 or an
// empty model).
func (m Model) Predict(n int) float64 {
	if !m.predicted || n < 1 {
		return 0
	}
	if m.single {
		fm, fn := float64(m.m), float64(n)
		if n >= m.m {
			return m.tm * (1 + m.eff*(fn-fm)/fm)
		}
		return m.tm * fn / fm
	}
	phi := basis(n)
	t := m.a*phi[0] + m.b*phi[1] + m.c*phi[2]
	if !(t > 0) || math.IsInf(t, 0) {
		return 0
	}
	v := 1 / t
	if n > m.largest {
		v = min(v, m.tm*float64(n)/float64(m.largest))
	}
	return v
}

// Sizes is how many trusted sizes the model was made from.
func (m Model) Sizes() int { return m.sizes }

// Terms returns the fitted a, b, c of t(n) = a + b/n + c·n (zero for a
// single-size model).
func (m Model) Terms() (a, b, c float64) { return m.a, m.b, m.c }
