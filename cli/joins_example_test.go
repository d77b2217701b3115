package cli

import (
	"cmp"
	"encoding/json"
	"slices"
	"testing"
)

// TestPaymentsExample runs examples/payments.yaml and checks it against an
// oracle computed from the orders and payments the feeder wrote: each order
// with a payment 0 to 10 minutes after it is in paid-orders once, with
// both; each order without one is in payment-missing once if the final
// watermark of its partition (the earliest of the two topics' latest event
// times there, minus 5 s) passed it by ten minutes, else nowhere yet.
func TestPaymentsExample(t *testing.T) {
	read := runExample(t, "payments.yaml", map[string]string{"records: 20000": "records: 12000"})
	type order struct {
		Order    string  `json:"order"`
		Customer string  `json:"customer"`
		Amount   float64 `json:"amount"`
		TS       int64   `json:"ts"`
	}
	type payment struct {
		Order  string  `json:"order"`
		Amount float64 `json:"amount"`
		TS     int64   `json:"ts"`
	}
	const upper, bound = 600_000, 5_000
	orders := map[string]order{}
	part := map[string]int32{}
	latestO, latestP := map[int32]int64{}, map[int32]int64{}
	for _, r := range read("orders") {
		var o order
		if json.Unmarshal(r.Value, &o) != nil || o.Order == "" {
			continue // the feeder's broken records
		}
		orders[o.Order], part[o.Order] = o, r.Partition
		latestO[r.Partition] = max(latestO[r.Partition], o.TS)
	}
	paidBy := map[string]payment{}
	for _, r := range read("payments") {
		var p payment
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatal(err)
		}
		latestP[r.Partition] = max(latestP[r.Partition], p.TS)
		if o, ok := orders[p.Order]; ok && p.TS >= o.TS && p.TS <= o.TS+upper {
			if part[p.Order] != r.Partition {
				t.Fatalf("payment of %s in partition %d, its order in %d: not co-partitioned", p.Order, r.Partition, part[p.Order])
			}
			paidBy[p.Order] = p
		}
	}
	wantMissing := map[string]bool{}
	for id, o := range orders {
		p := part[id]
		if _, paid := paidBy[id]; !paid && o.TS+upper < min(latestO[p], latestP[p])-bound {
			wantMissing[id] = true
		}
	}

	type result struct {
		Key   string   `json:"key"`
		Left  *order   `json:"left"`
		Right *payment `json:"right"`
	}
	gotPaid := map[string]bool{}
	for _, r := range read("paid-orders") {
		var res result
		if err := json.Unmarshal(r.Value, &res); err != nil {
			t.Fatal(err)
		}
		want, ok := paidBy[res.Key]
		switch {
		case !ok:
			t.Fatalf("paid-orders has %s, which no payment within 10 minutes pairs", r.Value)
		case gotPaid[res.Key]:
			t.Fatalf("paid-orders has %s twice", res.Key)
		case res.Left == nil || res.Right == nil || *res.Left != orders[res.Key] || *res.Right != want || string(r.Key) != res.Key:
			t.Fatalf("paid-orders has %s under key %s; want order %+v and payment %+v", r.Value, r.Key, orders[res.Key], want)
		case r.Timestamp.UnixMilli() != max(want.TS, orders[res.Key].TS):
			t.Fatalf("%s stamped %d, want the later of the two, %d", res.Key, r.Timestamp.UnixMilli(), want.TS)
		}
		gotPaid[res.Key] = true
	}
	if len(gotPaid) != len(paidBy) {
		t.Fatalf("%d orders in paid-orders, the oracle pairs %d", len(gotPaid), len(paidBy))
	}
	type alert struct {
		Order     string  `json:"order"`
		Customer  string  `json:"customer"`
		Amount    float64 `json:"amount"`
		OrderedAt int64   `json:"ordered_at"`
	}
	gotMissing := map[string]bool{}
	for _, r := range read("payment-missing") {
		var a alert
		if err := json.Unmarshal(r.Value, &a); err != nil {
			t.Fatal(err)
		}
		o := orders[a.Order]
		if !wantMissing[a.Order] || gotMissing[a.Order] || a != (alert{o.Order, o.Customer, o.Amount, o.TS}) {
			t.Fatalf("payment-missing has %s (expected: %v, seen before: %v)", r.Value, wantMissing[a.Order], gotMissing[a.Order])
		}
		gotMissing[a.Order] = true
	}
	if len(gotMissing) != len(wantMissing) {
		t.Fatalf("%d alerts, the oracle has %d", len(gotMissing), len(wantMissing))
	}
	if len(paidBy) < 1000 || len(wantMissing) < 100 {
		t.Fatalf("%d pairs and %d alerts: the example shows too little", len(paidBy), len(wantMissing))
	}
	t.Logf("%d orders: %d paid within 10 minutes, %d alerts, %d still open", len(orders), len(paidBy), len(wantMissing), len(orders)-len(paidBy)-len(wantMissing))
}

// TestEnrichExample runs examples/enrich.yaml and checks every enriched
// order against an oracle computed from the orders and the customers table
// the feeder wrote: the tier of its customer's row in force at the order's
// time (the last change stamped at or before it, in the order written), or
// "deleted" after a tombstone; each order at most once, and all but those
// the watermark had not passed when the feed stopped.
func TestEnrichExample(t *testing.T) {
	read := runExample(t, "enrich.yaml", map[string]string{"records: 20000": "records: 12000"})
	type order struct {
		Order    string  `json:"order"`
		Customer string  `json:"customer"`
		Amount   float64 `json:"amount"`
		TS       int64   `json:"ts"`
	}
	orders := map[string]order{}
	for _, r := range read("orders") {
		var o order
		if json.Unmarshal(r.Value, &o) == nil && o.Order != "" {
			orders[o.Order] = o
		}
	}
	type version struct {
		ts   int64
		tier string // "" for a tombstone
	}
	history := map[string][]version{} // per customer, in the order written
	for _, r := range read("customers") {
		v := version{ts: r.Timestamp.UnixMilli()}
		if r.Value != nil {
			var c struct{ Tier string }
			if err := json.Unmarshal(r.Value, &c); err != nil {
				t.Fatal(err)
			}
			v.tier = c.Tier
		}
		history[string(r.Key)] = append(history[string(r.Key)], v)
	}
	tierAt := func(customer string, ts int64) string {
		tier, at, found := "deleted", int64(0), false
		for _, v := range history[customer] {
			if v.ts <= ts && (!found || v.ts >= at) {
				at, found, tier = v.ts, true, cmp.Or(v.tier, "deleted")
			}
		}
		return tier
	}
	type result struct {
		Order    string  `json:"order"`
		Customer string  `json:"customer"`
		Amount   float64 `json:"amount"`
		TS       int64   `json:"ts"`
		Tier     string  `json:"tier"`
	}
	seen := map[string]bool{}
	tiers := map[string]int{}
	for _, r := range read("enriched-orders") {
		var res result
		if err := json.Unmarshal(r.Value, &res); err != nil {
			t.Fatal(err)
		}
		o, ok := orders[res.Order]
		switch {
		case !ok || seen[res.Order]:
			t.Fatalf("enriched-orders has %s (an order written: %v; seen before: %v)", r.Value, ok, seen[res.Order])
		case res.Customer != o.Customer || res.Amount != o.Amount || res.TS != o.TS || string(r.Key) != o.Customer:
			t.Fatalf("enriched-orders has %s under key %s for order %+v", r.Value, r.Key, o)
		case res.Tier != tierAt(o.Customer, o.TS):
			t.Fatalf("%s: tier %q, but the row of %s at %d says %q", res.Order, res.Tier, o.Customer, o.TS, tierAt(o.Customer, o.TS))
		}
		seen[res.Order] = true
		tiers[res.Tier]++
	}
	if len(seen) < len(orders)*95/100 || tiers["deleted"] == 0 || len(tiers) < 3 {
		t.Fatalf("%d of %d orders enriched, tiers %v: the example shows too little", len(seen), len(orders), tiers)
	}
	t.Logf("%d of %d orders enriched, each with its customer's row at its time: %v", len(seen), len(orders), tiers)
}

// TestThresholdsExample runs examples/thresholds.yaml, whose limits change
// while readings flow: which limit a reading meets depends on when its
// task applied the changes, so each alert is checked against the limits
// the feeder wrote: a reading it wrote, above a limit its sensor had, each
// once; and within a task (the readings' partition, which alerts keep:
// both are keyed by sensor) a sensor's limits only move forward.
func TestThresholdsExample(t *testing.T) {
	read := runExample(t, "thresholds.yaml", map[string]string{"records: 20000": "records: 12000"})
	type reading struct {
		Sensor      string  `json:"sensor"`
		Temperature float64 `json:"temperature"`
		Seq         int     `json:"seq"`
	}
	readings := map[int]reading{}
	for _, r := range read("sensor-readings") {
		var in reading
		if json.Unmarshal(r.Value, &in) == nil && in.Sensor != "" {
			readings[in.Seq] = in
		}
	}
	versions := map[string][]float64{} // per sensor, its limits in the order written
	for _, r := range read("sensor-limits") {
		var l struct {
			Sensor string  `json:"sensor"`
			Max    float64 `json:"max"`
		}
		if err := json.Unmarshal(r.Value, &l); err != nil {
			t.Fatal(err)
		}
		versions[l.Sensor] = append(versions[l.Sensor], l.Max)
	}
	type alert struct {
		Sensor      string  `json:"sensor"`
		Temperature float64 `json:"temperature"`
		Max         float64 `json:"max"`
		Seq         int     `json:"seq"`
	}
	seen := map[int]bool{}
	at := map[int32]map[string]int{} // per task and sensor, the index of the limit seen last
	for _, r := range read("sensor-alerts") {
		var a alert
		if err := json.Unmarshal(r.Value, &a); err != nil {
			t.Fatal(err)
		}
		in, ok := readings[a.Seq]
		if !ok || seen[a.Seq] || in.Sensor != a.Sensor || in.Temperature != a.Temperature || a.Temperature <= a.Max {
			t.Fatalf("alert %s: reading %+v (written: %v, alerted before: %v)", r.Value, in, ok, seen[a.Seq])
		}
		seen[a.Seq] = true
		if at[r.Partition] == nil {
			at[r.Partition] = map[string]int{}
		}
		// The limit it met is a version its sensor had, not before the
		// one this task met last.
		i := slices.Index(versions[a.Sensor][at[r.Partition][a.Sensor]:], a.Max)
		if i < 0 {
			t.Fatalf("alert %s: limit %v is no version of %s's limit at or after the one met before (versions %v)", r.Value, a.Max, a.Sensor, versions[a.Sensor])
		}
		at[r.Partition][a.Sensor] += i
	}
	changed := 0
	for _, v := range versions {
		changed += len(v) - 1
	}
	if len(seen) < 1000 || changed < 5 {
		t.Fatalf("%d alerts and %d limit changes: the example shows too little", len(seen), changed)
	}
	t.Logf("%d alerts over %d readings, each above a limit its sensor had, as %d limit changes came", len(seen), len(readings), changed)
}
