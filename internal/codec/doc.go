// Package codec holds the pipeline's hot-path encodings: a JSON decoder
// and encoder that keep whole numbers as int and decode only the fields a
// graph reads (Projection), and the binary form aggregate accumulators are
// stored in (Acc).
package codec
