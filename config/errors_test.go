package config

import (
	"errors"
	"slices"
	"testing"
)

func TestFieldErrorNamesPathAndLine(t *testing.T) {
	tests := []struct {
		name string
		err  *FieldError
		want string
	}{
		{"without a line it is path: message", &FieldError{Path: "sinks.alerts.topic", Msg: "required"}, "sinks.alerts.topic: required"},
		{"with a line it says which", &FieldError{Path: "sinks.alerts.topic", Line: 12, Msg: "required"}, "sinks.alerts.topic (line 12): required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestErrorsJoinsLinesAndUnwraps(t *testing.T) {
	first := &FieldError{Path: "name", Msg: "required"}
	second := &FieldError{Path: "checkpoint.interval", Line: 3, Msg: "must be positive, found 0s"}
	var err error = Errors{first, second}

	want := "name: required\ncheckpoint.interval (line 3): must be positive, found 0s"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe != first {
		t.Errorf("errors.As found %v, want the first FieldError", fe)
	}
	if !errors.Is(err, second) {
		t.Error("errors.Is does not find the second FieldError")
	}
}

func TestErrorsSortByLineThenPath(t *testing.T) {
	es := Errors{
		{Path: "b", Line: 2},
		{Path: "z", Line: 0},
		{Path: "a", Line: 2},
		{Path: "c", Line: 1},
		{Path: "a", Line: 0},
	}
	es.sort()
	var got []string
	for _, e := range es {
		got = append(got, e.Path)
	}
	if want := []string{"a", "z", "c", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("sorted paths = %v, want %v", got, want)
	}
}
