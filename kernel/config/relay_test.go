package config

import (
	"errors"
	"strings"
	"testing"
)

func TestInferenceProviders(t *testing.T) {
	const base = `{"state_dir":"/s","domain":{"backend":"unsafe_local"},"sensor":{"kind":"rules"},"inference":{"providers":{"p":`
	good := `{"wire_api":"messages","upstream":"http://127.0.0.1:9","models":["m"],"prices":{"m":{"input_micro_usd_per_mtok":1,"output_micro_usd_per_mtok":2}}}`
	c, err := Parse([]byte(base + good + `}}}`))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Inference.Providers["p"]
	if len(p.Routes) != 1 || p.Routes[0] != "/v1/messages" || p.MaxRequestBytes != DefaultRelayMaxRequestBytes ||
		p.MaxOutputTokens != DefaultRelayMaxOutputTokens || p.HeaderTimeoutMS != DefaultRelayHeaderTimeoutMS {
		t.Fatalf("defaults: %+v", p)
	}
	bad := func(field, val string) string {
		return strings.Replace(good, `"wire_api"`, `"`+field+`":`+val+`,"wire_api"`, 1)
	}
	cases := []struct{ name, provider, key string }{
		{"wire api", strings.Replace(good, `"messages"`, `"completions"`, 1), "inference.providers.p.wire_api"},
		{"http to a remote host", strings.Replace(good, `127.0.0.1:9`, `api.example.com`, 1), "inference.providers.p.upstream"},
		{"user info", strings.Replace(good, `http://127.0.0.1:9`, `https://k:secret@api.example.com`, 1), "inference.providers.p.upstream"},
		{"query", strings.Replace(good, `127.0.0.1:9`, `127.0.0.1:9?x=1`, 1), "inference.providers.p.upstream"},
		{"file scheme", strings.Replace(good, `http://127.0.0.1:9`, `file:///etc`, 1), "inference.providers.p.upstream"},
		{"both credentials", strings.Replace(good, `"wire_api"`, `"credential_env":"K","credential_file":"/k","wire_api"`, 1), "inference.providers.p.credential_env"},
		{"bad env", bad("credential_env", `"lower"`), "inference.providers.p.credential_env"},
		{"relative file", bad("credential_file", `"key"`), "inference.providers.p.credential_file"},
		{"foreign route", bad("routes", `["/v1/files"]`), "inference.providers.p.routes"},
		{"other api's route", bad("routes", `["/v1/responses"]`), "inference.providers.p.routes"},
		{"no models", strings.Replace(good, `["m"]`, `[]`, 1), "inference.providers.p.models"},
		{"unpriced model", strings.Replace(good, `["m"]`, `["m","n"]`, 1), "inference.providers.p.prices"},
		{"negative price", strings.Replace(good, `"input_micro_usd_per_mtok":1`, `"input_micro_usd_per_mtok":-1`, 1), "inference.providers.p.prices.m"},
		{"tiny body cap", bad("max_request_bytes", `10`), "inference.providers.p.max_request_bytes"},
		{"unknown key", bad("api_key", `"sk-1"`), "inference.providers.p.api_key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(base + tc.provider + `}}}`))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("admitted (%v)", err)
			}
			found := false
			for _, p := range ce.Problems {
				found = found || p.Key == tc.key
				if strings.Contains(p.Problem, "secret") {
					t.Fatalf("problem echoes a value: %s", p)
				}
			}
			if !found {
				t.Fatalf("problems %v do not name %s", ce.Problems, tc.key)
			}
		})
	}
}
