// A producer written in Go (the standard library only), for bench/producers_accept.py: sends n game events to the
// producers' HTTP API from t goroutines, one keep-alive connection each, and prints the inputs per second.
//
//	go run . <base-url> <token> <n> <t> <run-id>
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

func main() {
	base, token, run := os.Args[1], os.Args[2], os.Args[5]
	n, _ := strconv.Atoi(os.Args[3])
	t, _ := strconv.Atoi(os.Args[4])
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: t}, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	var failed sync.Once
	start := time.Now()
	for k := 0; k < t; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for i := k; i < n; i += t {
				body, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("event %d", i),
					"message_id": fmt.Sprintf("go-%s-%d", run, i)})
				req, _ := http.NewRequest("POST", fmt.Sprintf("%s/v1/conversations/g%d/events", base, i%200),
					bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					failed.Do(func() { fmt.Fprintln(os.Stderr, err); os.Exit(1) })
				}
				answer, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					failed.Do(func() { fmt.Fprintln(os.Stderr, resp.StatusCode, string(answer)); os.Exit(1) })
				}
			}
		}(k)
	}
	wg.Wait()
	fmt.Printf("%.1f\n", float64(n)/time.Since(start).Seconds())
}
