package codec

import (
	"reflect"
	"testing"
	"unsafe"
)

// TestQuickFieldListTakesWhatItCan checks that the quick path decodes the
// common documents itself, building what the general one builds, and
// leaves the others to it.
func TestQuickFieldListTakesWhatItCan(t *testing.T) {
	p := NewProjection([]string{"seq", "ts", "name"})
	for _, c := range []struct {
		doc   string
		quick bool
	}{
		{`{"seq":12345678,"ts":1795955790878123,"pad":"xxxxxxxx"}`, true},
		{` { "seq" : 1 , "name" : "a b" , "skip" : [1, {"x": null}], "ts": -0.5e3 } `, true},
		{`{"name":{"first":"a"},"seq":-1,"seq":7,"pad":"caf\u00e9"}`, true},
		{`{"skip":"\u00e9","other":true,"n":0}`, true},
		{`{}`, true},
		{`{"s\u0065q":1}`, false},             // an escaped key
		{`{"seq":1,}`, false},                 // invalid
		{`{"seq":1} x`, false},                // data after it
		{`[1,2]`, false},                      // not an object
		{`{"seq":01}`, false},                 // invalid number
		{`{"skip":"a` + "\x01" + `"}`, false}, // a control byte in a string
	} {
		fields, ok := quickFieldList([]byte(c.doc), p, nil)
		if ok != c.quick {
			t.Errorf("%s: quick %v, want %v", c.doc, ok, c.quick)
			continue
		}
		if !ok {
			if len(fields) != 0 {
				t.Errorf("%s: gave up with %d fields", c.doc, len(fields))
			}
			continue
		}
		d := jsonDecoder{b: []byte(c.doc), keepRaw: true}
		d.space()
		want, err := d.fieldList(p, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.doc, err)
		}
		if !reflect.DeepEqual(fields, want) {
			t.Errorf("%s:\n got %#v\nwant %#v", c.doc, fields, want)
		}
	}
	// Names that are not plain are left to the general path.
	if _, ok := quickFieldList([]byte(`{"é":1}`), NewProjection([]string{"é"}), nil); ok {
		t.Error("a projection of a name above ASCII took the quick path")
	}
}

func TestInternKeepsOneCopy(t *testing.T) {
	a := Intern(string([]byte("field")))
	b := Intern(string([]byte("field")))
	if unsafe.StringData(a) != unsafe.StringData(b) || a != "field" {
		t.Fatalf("two copies of %q", a)
	}
	p := NewProjection([]string{string([]byte("field"))})
	if unsafe.StringData(p.Names()[0]) != unsafe.StringData(a) {
		t.Fatal("a projection's names are not interned")
	}
}

// TestQuickFieldListKeepsTheFirstOfNamesAlike checks names sharing a first
// byte, a name given twice and the empty name.
func TestQuickFieldListKeepsTheFirstOfNamesAlike(t *testing.T) {
	doc := []byte(`{"sum":1,"s":2,"seq":3,"":4}`)
	for _, names := range [][]string{{"seq", "s", "sum", "seq"}, {"s", "", "sum"}} {
		p := NewProjection(names)
		got, ok := quickFieldList(doc, p, nil)
		d := jsonDecoder{b: doc, keepRaw: true}
		want, err := d.fieldList(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got %#v\nwant %#v", names, got, want)
		}
		if hasEmpty := names[1] == ""; ok == hasEmpty {
			t.Errorf("%q: quick %v", names, ok)
		}
	}
}
