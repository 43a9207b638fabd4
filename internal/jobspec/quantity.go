package jobspec

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// Quantity is a Kubernetes resource quantity such as "2", "500m", "4Gi" or
// "1e3", held in thousandths of the unit (millicores for CPU, millibytes
// for memory) so that "500m" is exact.
type Quantity struct {
	// Text is the quantity as written.
	Text string
	// Milli is the value in thousandths of the unit.
	Milli int64
}

// Value returns the quantity in whole units, rounded up ("500m" is 1).
func (q Quantity) Value() int64 {
	return (q.Milli + 999) / 1000
}

// String returns the quantity as written.
func (q Quantity) String() string { return q.Text }

// quantitySyntax says what ParseQuantity accepts.
const quantitySyntax = `want a number with an optional suffix: m (thousandths), k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent (1e3); for example "2", "500m", "4Gi"`

// suffixes maps a quantity suffix to its multiplier.
var suffixes = map[string]*big.Rat{
	"":   big.NewRat(1, 1),
	"m":  big.NewRat(1, 1000),
	"k":  big.NewRat(1e3, 1),
	"M":  big.NewRat(1e6, 1),
	"G":  big.NewRat(1e9, 1),
	"T":  big.NewRat(1e12, 1),
	"P":  big.NewRat(1e15, 1),
	"E":  big.NewRat(1e18, 1),
	"Ki": big.NewRat(1<<10, 1),
	"Mi": big.NewRat(1<<20, 1),
	"Gi": big.NewRat(1<<30, 1),
	"Ti": big.NewRat(1<<40, 1),
	"Pi": big.NewRat(1<<50, 1),
	"Ei": big.NewRat(1<<60, 1),
}

// ParseQuantity parses a non-negative Kubernetes quantity. Values that do
// not fit in an int64 of thousandths (about 8 PiB of memory) are refused, as
// are negative values and more precision than a thousandth.
func ParseQuantity(s string) (Quantity, error) {
	if s == "" {
		return Quantity{}, errors.New("empty quantity; " + quantitySyntax)
	}
	if len(s) > 64 {
		return Quantity{}, errors.New("quantity too long; " + quantitySyntax)
	}
	if strings.HasPrefix(s, "-") {
		return Quantity{}, fmt.Errorf("%q is negative; resources must be 0 or more", s)
	}
	num := strings.TrimPrefix(s, "+")
	i := 0
	for i < len(num) && (num[i] >= '0' && num[i] <= '9' || num[i] == '.') {
		i++
	}
	digits, suffix := num[:i], num[i:]
	if digits == "" || digits == "." || strings.Count(digits, ".") > 1 {
		return Quantity{}, fmt.Errorf("%q is not a quantity; %s", s, quantitySyntax)
	}
	v, ok := new(big.Rat).SetString(digits)
	if !ok {
		return Quantity{}, fmt.Errorf("%q is not a quantity; %s", s, quantitySyntax)
	}
	mult, ok := suffixes[suffix]
	if !ok {
		exp, isExp := parseExponent(suffix)
		if !isExp {
			return Quantity{}, fmt.Errorf("%q has an unknown suffix %q; %s", s, suffix, quantitySyntax)
		}
		mult = new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil))
		if exp < 0 {
			mult.Inv(mult)
		}
	}
	v.Mul(v, mult)
	v.Mul(v, big.NewRat(1000, 1))
	if !v.IsInt() {
		return Quantity{}, fmt.Errorf("%q is more precise than a thousandth; round it (e.g. to %s)", s, roundHint(v))
	}
	if v.Num().Cmp(big.NewInt(math.MaxInt64)) > 0 {
		return Quantity{}, fmt.Errorf("%q is too large", s)
	}
	return Quantity{Text: s, Milli: v.Num().Int64()}, nil
}

// parseExponent reads "e3", "E-2" (at most two digits).
func parseExponent(s string) (int, bool) {
	if len(s) < 2 || (s[0] != 'e' && s[0] != 'E') {
		return 0, false
	}
	rest, neg := s[1:], false
	if rest[0] == '+' || rest[0] == '-' {
		neg, rest = rest[0] == '-', rest[1:]
	}
	if rest == "" || len(rest) > 2 {
		return 0, false
	}
	n := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// roundHint shows v (in thousandths) rounded up, as a milli quantity.
func roundHint(v *big.Rat) string {
	q := new(big.Int).Quo(v.Num(), v.Denom())
	return q.Add(q, big.NewInt(1)).String() + "m"
}
