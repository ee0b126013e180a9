package main

import (
	"slices"
	"testing"
	"time"
)

func TestQuantileIsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := quantile(ds, q); got != want {
			t.Errorf("quantile %.2f = %v, want %v", q, got, want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("quantile sorted its input in place")
	}
}

func TestPhaseMediansInTimeOrder(t *testing.T) {
	ms := time.Millisecond
	ss := []sample{
		{phases: map[string]time.Duration{"exec1": 1 * ms, "cgroup_created": 5 * ms, "started_frame": 9 * ms, "rare": 2 * ms}},
		{phases: map[string]time.Duration{"exec1": 3 * ms, "cgroup_created": 4 * ms, "started_frame": 11 * ms}},
		{phases: map[string]time.Duration{"exec1": 2 * ms, "cgroup_created": 6 * ms, "started_frame": 10 * ms}},
	}
	order, med := phaseMedians(ss)
	if want := []string{"exec1", "cgroup_created", "started_frame"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v (a phase most runs lack is dropped)", order, want)
	}
	if med["exec1"] != 2 || med["cgroup_created"] != 5 || med["started_frame"] != 10 {
		t.Fatalf("medians %v", med)
	}
}

func TestParseLevels(t *testing.T) {
	if l, err := parseLevels("1, 10,100"); err != nil || !slices.Equal(l, []int{1, 10, 100}) {
		t.Fatalf("%v %v", l, err)
	}
	for _, bad := range []string{"0", "1,,2", "x", "-3"} {
		if _, err := parseLevels(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
