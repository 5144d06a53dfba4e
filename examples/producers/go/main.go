// Send three articles to simdedup and print their verdicts.
//
//	go mod tidy   # once: fetches go-redis and writes go.sum
//	go run . [REDIS_URL] [NAMESPACE]
//
// REDIS_URL defaults to $REDIS_URL or redis://127.0.0.1:6379/0, NAMESPACE to
// "default". A `simdedup worker` must be running on the same Redis and
// namespace. Prints one line per article: id, verdict, dup_of (or the code).
//
// Unlike the redis-cli, Python and Node.js producers beside it, this one is
// not built or run by the test suite (it needs go-redis from the Go module
// proxy): it follows the same contract, docs/protocol.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

type article struct{ id, text string }

var articles = []article{
	{"go-1", "The national library opened its restored map room on Friday after three years of work. " +
		"Visitors can now see the seventeenth-century atlases that were damaged by a burst pipe in 2021."},
	// The same article in markup: expected duplicate of go-1.
	{"go-1-copy", "<div><p>The national library opened its restored map room on Friday after three years of work.</p>" +
		"<p>Visitors can now see the seventeenth-century atlases that were damaged by a burst pipe in 2021.</p></div>"},
	{"go-2", "Farmers in the eastern valley expect a record apricot harvest after a mild spring without late frosts, " +
		"the regional growers' association said."},
}

func main() {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	ns := "default"
	if len(os.Args) > 1 {
		url = os.Args[1]
	}
	if len(os.Args) > 2 {
		ns = os.Args[2]
	}
	if err := run(url, ns); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(url, ns string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	in, out := fmt.Sprintf("simdedup:{%s}:in", ns), fmt.Sprintf("simdedup:{%s}:out", ns)

	// Read verdicts from here on: the newest output entry before sending.
	last := "0-0"
	newest, err := rdb.XRevRangeN(ctx, out, "+", "-", 1).Result()
	if err != nil {
		return err
	}
	if len(newest) > 0 {
		last = newest[0].ID
	}

	// XADD returns the entry id: the `source` field of its verdict.
	var order []string
	sources := map[string]bool{}
	for _, a := range articles {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{
			Stream: in,
			Values: map[string]interface{}{"id": a.id, "text": a.text},
		}).Result()
		if err != nil {
			return err
		}
		order = append(order, id)
		sources[id] = true
	}

	verdicts := map[string]map[string]interface{}{}
	deadline := time.Now().Add(60 * time.Second)
	for len(verdicts) < len(order) {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out: %d of %d verdicts (is a worker running on namespace %s?)",
				len(verdicts), len(order), ns)
		}
		streams, err := rdb.XRead(ctx, &redis.XReadArgs{
			Streams: []string{out, last},
			Count:   100,
			Block:   time.Second,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue // nothing new within the block time
		}
		if err != nil {
			return err
		}
		for _, s := range streams {
			for _, m := range s.Messages {
				last = m.ID
				if src, ok := m.Values["source"].(string); ok && sources[src] {
					verdicts[src] = m.Values
				}
			}
		}
	}
	for _, src := range order { // in sending order
		v := verdicts[src]
		extra := "-"
		if d, ok := v["dup_of"]; ok {
			extra = fmt.Sprint(d)
		} else if c, ok := v["code"]; ok {
			extra = fmt.Sprint(c)
		}
		fmt.Println(v["id"], v["verdict"], extra)
	}
	return nil
}
