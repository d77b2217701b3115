package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// durationHint says what a duration looks like, for messages.
const durationHint = `a duration such as "500ms", "1s" or "1h30m" (units: ns, us, ms, s, m, h)`

// ParseDuration reads a duration as the configuration writes them: a
// number with a unit ("500ms", "1h30m"), or "0". It is the one reader of
// durations: settings in the file, PIPELINE_* variables and the values of
// operator specs (DurationOf) all go through it. A bare number is an
// error, not nanoseconds, and so is a negative duration. Its errors say
// what was found and what a valid value looks like; naming the setting
// is the caller's.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(strings.ReplaceAll(t, "_", ""), 64); err == nil {
		if n == 0 {
			return 0, nil
		}
		return 0, bareNumber(t)
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("expected %s, found %q", durationHint, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("must not be negative, found %s", t)
	}
	return d, nil
}

// DurationOf is ParseDuration for a value of an operator's spec, as
// Step.Spec holds them: a string, or a number, of which only 0 is a
// duration. nil is 0: the key is not set.
func DurationOf(v any) (time.Duration, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case string:
		return ParseDuration(x)
	case time.Duration:
		if x < 0 {
			return 0, fmt.Errorf("must not be negative, found %s", fmtDuration(x))
		}
		return x, nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return ParseDuration(fmt.Sprint(x))
	case []any:
		return 0, fmt.Errorf("expected %s, found a list", durationHint)
	case map[string]any:
		return 0, fmt.Errorf("expected %s, found a mapping", durationHint)
	}
	return 0, fmt.Errorf("expected %s, found %v", durationHint, v)
}

func bareNumber(n string) error {
	return errors.New(`a duration needs a unit: found ` + n + `; write "` + n + `s", "` + n + `ms" or "` + n + `m" (units: ns, us, ms, s, m, h)`)
}
