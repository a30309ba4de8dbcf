// Verifying a Core Webhooks delivery in Go, with the standard library only.
package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// Envelope is the body of every delivery; Payload stays raw JSON (null when PayloadOmitted).
type Envelope struct {
	EventID        string          `json:"eventId"`
	EventType      string          `json:"eventType"`
	OccurredAt     string          `json:"occurredAt"`
	EntityID       string          `json:"entityId"`
	Reference      *string         `json:"reference"`
	ResourceURL    string          `json:"resourceUrl"`
	SubscriptionID string          `json:"subscriptionId"`
	Payload        json.RawMessage `json:"payload"`
	PayloadOmitted bool            `json:"payloadOmitted"`
}

// VerifyWebhook checks the signature over the raw body with each secret (the new and the previous one during a
// rotation), then parses the body. An error means: answer 401 and process nothing.
func VerifyWebhook(header http.Header, rawBody []byte, secrets []string) (*Envelope, error) {
	signature := header.Get("X-Webhook-Signature") // or the name the subscription chose
	if signature == "" {
		return nil, errors.New("missing X-Webhook-Signature header")
	}
	given, err := base64.StdEncoding.DecodeString(signature)
	if err != nil {
		return nil, errors.New("invalid signature")
	}
	matched := false
	for _, secret := range secrets {
		// The key is the secret as UTF-8 text, exactly as returned (not base64-decoded); the message is the raw body.
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(rawBody)
		if hmac.Equal(mac.Sum(nil), given) { // constant time
			matched = true
		}
	}
	if !matched {
		return nil, errors.New("invalid signature")
	}
	var envelope Envelope // parsed only once verified
	if err := json.Unmarshal(rawBody, &envelope); err != nil {
		return nil, fmt.Errorf("invalid body: %w", err)
	}
	return &envelope, nil
}

// SecretsFromEnv returns the subscription's secret, and the previous one for 24 hours after a rotation.
func SecretsFromEnv() []string {
	var secrets []string
	for _, name := range []string{"WEBHOOK_SECRET", "WEBHOOK_PREVIOUS_SECRET"} {
		if secret := os.Getenv(name); secret != "" {
			secrets = append(secrets, secret)
		}
	}
	return secrets
}

// Handler is a receiver: it reads the raw body, verifies it, answers at once and hands new events to process.
func Handler(secrets []string, process func(*Envelope)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rawBody, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		envelope, err := VerifyWebhook(r.Header, rawBody, secrets)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusAccepted) // acknowledge first; deduplicate on envelope.EventID in process
		go process(envelope)
	}
}

// A command line for this repository's tests (sdk/snippets.test.ts), used like a receiver would be:
//
//	WEBHOOK_SECRET=... [WEBHOOK_PREVIOUS_SECRET=...] go run verify.go '<signature header>' < body
//
// prints the event's type and id and exits 0 when verified, prints why and exits 1 when refused.
func main() {
	header := http.Header{}
	if len(os.Args) > 1 {
		header.Set("X-Webhook-Signature", os.Args[1])
	}
	rawBody, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	envelope, err := VerifyWebhook(header, rawBody, SecretsFromEnv())
	if err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	fmt.Println("verified", envelope.EventType, envelope.EventID)
}
