// A game engine's producer for Parley over its HTTP API: it sends a game event and a chat turn to one
// conversation, then what a game drives (docs/game.md): a fact that replaces the one of its key, an event the
// bot answers, and a nudge held as a timer and cancelled when the player moves; last it reads the conversation's
// summary. Standard library only.
//
//	go build -o parley-producer . && ./parley-producer -url http://localhost:8080 -token "$TOKEN" -conversation 447700900123
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"
)

// Client talks to Parley's producers' API (/v1/).
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
	// Tries is how many times a 429 (mailbox full) or 503 (store unavailable) is sent again, after Retry-After.
	Tries int
}

// Accepted is the 202 answer: the input's id, and whether that id was accepted before (nothing new queued).
type Accepted struct {
	InputID   string `json:"input_id"`
	Duplicate bool   `json:"duplicate"`
}

// Problem is every error answer: what is wrong and, for a 400/422, the field at fault.
type Problem struct {
	Method string  `json:"-"`
	Path   string  `json:"-"`
	Status int     `json:"-"`
	Detail string  `json:"error"`
	Field  *string `json:"field"`
}

// Error makes a Problem the error do returns (with the method and path it answered).
func (p *Problem) Error() string {
	return p.String()
}

func (p *Problem) String() string {
	if p.Field != nil {
		return fmt.Sprintf("%s %s: %d: %s (field %s)", p.Method, p.Path, p.Status, p.Detail, *p.Field)
	}
	return fmt.Sprintf("%s %s: %d: %s", p.Method, p.Path, p.Status, p.Detail)
}

// Message is the body of POST .../messages; Event of POST .../events. Only Text is required. At holds the input
// until then (a timer: RFC 3339 with an offset, as time.Time's JSON is); nil sends it now.
type Message struct {
	Text      string     `json:"text"`
	MessageID string     `json:"message_id,omitempty"`
	ReplyTo   string     `json:"reply_to,omitempty"`
	Recipient string     `json:"recipient,omitempty"`
	System    string     `json:"system,omitempty"`
	At        *time.Time `json:"at,omitempty"`
}

// Event: Key makes the text the conversation's fact of that key (it replaces the one before); Respond has the
// model answer the event itself, with no player message.
type Event struct {
	Text      string     `json:"text"`
	MessageID string     `json:"message_id,omitempty"`
	Pinned    bool       `json:"pinned,omitempty"`
	Key       string     `json:"key,omitempty"`
	Respond   bool       `json:"respond,omitempty"`
	At        *time.Time `json:"at,omitempty"`
}

// Cancelled is the answer of DELETE .../scheduled/{message_id}.
type Cancelled struct {
	MessageID string `json:"message_id"`
	Cancelled bool   `json:"cancelled"`
}

// do sends one request; a 429 or 503 is sent again (the same body, so the same message id: never queued twice).
func (c *Client) do(method, path string, body any, out any) error {
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			return err
		}
	}
	for try := 1; ; try++ {
		req, err := http.NewRequest(method, c.BaseURL+path, bytes.NewReader(raw))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.Token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.HTTP.Do(req)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode < 300 {
			if out == nil || len(data) == 0 {
				return nil
			}
			return json.Unmarshal(data, out)
		}
		if (resp.StatusCode == 429 || resp.StatusCode == 503) && try < c.Tries {
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			time.Sleep(time.Duration(wait) * time.Second)
			continue
		}
		p := &Problem{Method: method, Path: path, Status: resp.StatusCode}
		if json.Unmarshal(data, p) != nil {
			p.Detail = string(data)
		}
		return p
	}
}

func (c *Client) SendMessage(conversationID string, m Message) (Accepted, error) {
	var a Accepted
	err := c.do("POST", "/v1/conversations/"+url.PathEscape(conversationID)+"/messages", m, &a)
	return a, err
}

func (c *Client) SendEvent(conversationID string, e Event) (Accepted, error) {
	var a Accepted
	err := c.do("POST", "/v1/conversations/"+url.PathEscape(conversationID)+"/events", e, &a)
	return a, err
}

// CancelScheduled drops a held input that is not yet due: false when none is held under that id (never
// scheduled, cancelled before, or already due: the API answers 404).
func (c *Client) CancelScheduled(conversationID, messageID string) (bool, error) {
	var answer Cancelled
	path := "/v1/conversations/" + url.PathEscape(conversationID) + "/scheduled/" + url.PathEscape(messageID)
	err := c.do("DELETE", path, nil, &answer)
	if p, ok := err.(*Problem); ok && p.Status == 404 {
		return false, nil
	}
	return answer.Cancelled, err
}

// Summary is what `parley show` prints (state, mailbox and outbox depth, last replies, ...).
func (c *Client) Summary(conversationID string) (map[string]any, error) {
	var s map[string]any
	err := c.do("GET", "/v1/conversations/"+url.PathEscape(conversationID), nil, &s)
	return s, err
}

func main() {
	base := flag.String("url", "http://localhost:8080", "the webhook process of Parley")
	token := flag.String("token", os.Getenv("PARLEY_TOKEN"), "a producer's token from PARLEY_API_TOKENS")
	cid := flag.String("conversation", "447700900123", "the conversation id (the player's number)")
	flag.Parse()
	c := &Client{BaseURL: *base, Token: *token, HTTP: &http.Client{Timeout: 10 * time.Second}, Tries: 5}

	ev, err := c.SendEvent(*cid, Event{Text: "The player tagged Harrogate Theatre", MessageID: "tag-8812", Pinned: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("event %s duplicate=%t\n", ev.InputID, ev.Duplicate)
	msg, err := c.SendMessage(*cid, Message{Text: "Where is the next clue?", MessageID: "msg-0001"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("message %s duplicate=%t\n", msg.InputID, msg.Duplicate)
	for _, e := range []Event{
		{Text: "The player's current target is Bettys Cafe", MessageID: "target-1", Key: "target"},
		{Text: "The player's current target is the Royal Pump Room", MessageID: "target-2", Key: "target"},
		{Text: "The player has just tagged Harrogate Theatre (+10 points)", MessageID: "tag-8813", Respond: true},
	} {
		if _, err := c.SendEvent(*cid, e); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	in5 := time.Now().Add(5 * time.Minute)
	nudge, err := c.SendMessage(*cid, Message{Text: "I haven't moved for five minutes. Any hint?", MessageID: "nudge-1", At: &in5})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cancelled, err := c.CancelScheduled(*cid, nudge.InputID) // the player moved: no nudge
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("nudge %s cancelled=%t\n", nudge.InputID, cancelled)
	summary, err := c.Summary(*cid)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("summary mailbox_depth=%v outbox_depth=%v version=%v\n",
		summary["mailbox_depth"], summary["outbox_depth"], summary["version"])
}
