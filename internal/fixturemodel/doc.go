// Package fixturemodel runs fixture model servers for tests: real HTTP
// servers on loopback speaking the three wire APIs an agent CLI may use
// (OpenAI Responses, Chat Completions, Anthropic Messages), answering from a
// script of turns (tool calls or a final text, with usage), streamed as SSE
// when the request asks for it and as one JSON document otherwise.
//
// Every request is recorded (method, path, query, headers including the
// credential it carried, body and its digest), so a test can count the
// calls that reached the "provider" and assert the key it saw.
//
// Invariant: a fixture server listens on a loopback address only, and it
// never calls out; it is test equipment, never linked into the kernel.
package fixturemodel
