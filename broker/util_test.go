package broker

import (
	"encoding/base64"

	"github.com/google/uuid"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func mustUUID(s string) uuid.UUID { return uuid.MustParse(s) }
