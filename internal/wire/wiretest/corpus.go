// Package wiretest holds the seed corpus of the request decoders' fuzz
// tests, good bodies and bad, by verb: the wire package fuzzes its
// decoders from it, and the bridge sends all of it to a running broker.
// It also builds the reference shape's push body for benchmarks.
package wiretest

import (
	"strconv"
	"strings"

	"github.com/combmq/comb/protocol"
)

// Bodies are request bodies by verb. Put's body is a message: any bytes.
var Bodies = map[string][]string{
	protocol.VerbPush: {
		`{"messages":[{"partition":"eu","id":"order-7","data":{"sku":42}},{"data_b64":"AAEC"}]}`,
		`{"messages":[{"data_b64":""}]}`, `{"messages":[{"data": [1, {"x" : "y"}] }]}`, `{"messages":[]}`, ``, `{}`, `[]`,
		`{"messages":[{"data":1,"data_b64":""}]}`, `{"messages":[{"data_b64":"AAE"}]}`, `{"messages":[{"partition":"\u0000","data":1}]}`,
		`{"messages":[{"data":"\ud800"}]}`, `{"Messages":[{"DATA":1}]}`, `{"messages":[{"data":1}]} `, `{"messages":[{"data":1}]}]`,
		"{\"messages\":[{\"data\":1,\"partition\":\"eu\xff\"}]}", `{"messages":[{"data":1},{"data":2,"id":"x\ud800"}]}`,
		`{"messages":[{"data":"` + strings.Repeat("x", 200) + `"}]}`,
	},
	protocol.VerbPut: {`{"sku":42}`, `not json`, ``, "\x00\xff", `"` + strings.Repeat("y", 300) + `"`},
	protocol.VerbPop: {``, `{}`, `{"group":"billing","partition":"eu","max":100,"partitions":1,"wait_ms":5000,"lease_ms":30000,"auto_ack":false,"from":"all"}`,
		`{"from":"2026-11-30T10:00:00Z"}`, `{"max":0}`, `{"max":1e3}`, `{"wait_ms":-1}`, `{"from":"new","partitions":1000}`, `{"lease_ms":99}`, `null`,
		"{\"group\":\"g\xc3\"}", `{"wait":1}`,
		`{"group":"g","max":1,"acks":[{"partition":"p","offset":0,"lease":"l-1-6c0e3a52e4bd1d5f"},{"offset":2,"lease":"l","status":"failed","delay_ms":5,"error":"x"}]}`,
		`{"acks":[]}`, `{"acks":[{"offset":1}]}`, `{"acks":{}}`, `{"acks":[{"offset":1,"lease":"l","status":"nope"}]}`},
	protocol.VerbNamespacePop: {``, `{}`, `{"group":"billing","max":10,"wait_ms":2000}`, `{"partition":"eu"}`, `{"partition":""}`,
		`{"partitions":3,"auto_ack":true,"lease_ms":1000}`, `{"max":0}`, `{"namespace":true}`, `{"from":"new"}`, `null`, `[]`,
		`{"acks":[{"offset":0,"lease":"l"}]}`},
	protocol.VerbAck: {`{"group":"billing","acks":[{"partition":"eu","offset":17,"lease":"l-9f2c","status":"completed"}]}`,
		`{"acks":[{"offset":0,"lease":"l"},{"offset":1,"lease":"l","status":"dead"}]}`, `{"acks":[{"offset":1,"lease":"l","status":"nope"}]}`,
		`{"acks":[]}`, ``, `{"acks":[{"offset":-1,"lease":"l"}]}`, `{"acks":[{"offset":1}]}`,
		`{"acks":[{"partition":"\udc00","offset":0,"lease":"l"}]}`,
		`{"acks":[{"offset":1,"lease":"l","status":"failed","delay_ms":500,"error":"timeout"}]}`,
		`{"acks":[{"offset":1,"lease":"l","status":"retry","delay_ms":0}]}`, `{"acks":[{"offset":1,"lease":"l","delay_ms":5}]}`,
		`{"acks":[{"offset":1,"lease":"l","status":"failed","delay_ms":-1}]}`, `{"acks":[{"offset":1,"lease":"l","status":"retry","error":"x"}]}`,
		`{"acks":[{"offset":1,"lease":"l","status":"dead","error":"a\nb"}]}`},
	protocol.VerbTxn: {`{"acks":[{"queue":"in","group":"g","partition":"p","offset":3,"lease":"l-1-ab"}],"push":[{"queue":"out","messages":[{"id":"x","data":{"n":1}}]}]}`,
		`{"push":[{"queue":"out","messages":[{"data_b64":""}]}]}`, `{"acks":[{"queue":"in","offset":0,"lease":"l","status":"dead"}]}`,
		``, `{}`, `{"acks":[],"push":[]}`, `{"acks":null,"push":null}`, `{"acks":[{"offset":0,"lease":"l"}]}`, `{"push":[{"messages":[{"data":1}]}]}`,
		`{"push":[{"queue":"out"}]}`, `{"push":[null]}`, `{"acks":[null]}`, `{"acks":[{"queue":"a..b","offset":0,"lease":"l"}]}`,
		`{"push":[{"queue":"o","messages":[{"data":1}],"x":1}]}`, `{"push":{"queue":"o"}}`, `{"acks":[{"queue":"q","offset":1,"lease":"l","stauts":"dead"}]}`,
		"{\"push\":[{\"queue\":\"o\xff\",\"messages\":[{\"data\":1}]}]}", "{\"push\":[{\"queue\":\"o\",\"messages\":[{\"data\":\"\xff\"}]}]}",
		`{"acks":[{"queue":"q","group":"\ud800","offset":1,"lease":"l"}]}`, `{"push":[{"queue":"o","messages":[{"data":1}]}]} x`, `{"acks":[{"queue":"q","offset":1,"lease":"l"}],}`,
		`{"acks":[{"queue":"q","offset":1,"lease":"l","status":"failed","delay_ms":500,"error":"timeout"}]}`, `{"acks":[{"queue":"q","offset":1,"lease":"l","delay_ms":5}]}`},
	protocol.VerbRenew: {`{"leases":["l"]}`, `{"leases":["l"],"lease_ms":1}`, `{"leases":[]}`, ``, `{"leases":"l"}`},
	protocol.VerbConfigure: {``, `{}`, `{"lease_ms":1000,"max_attempts":5,"dead_letter":false}`, `{"max_message_bytes":0}`,
		`{"max_bytes":9007199254740991}`, `{"lease_ms":null}`, `{"nope":1}`, `{"lease_ms":5}`,
		`{"retry_delay_ms":1000,"retry_backoff_pct":200,"retry_delay_max_ms":60000}`, `{"retry_backoff_pct":99}`},
	protocol.VerbInfo: {``, `{}`, `{"x":1}`, `{"limit":1}`, `{"limit":0}`, `{"limit":2,"after":"AAJldWc"}`, `{"after":"AA"}`,
		`{"after":"!"}`, `{"limit":1.5}`},
	protocol.VerbList:   {``, `{}`, `[]`, `{"limit":1}`, `{"limit":20000}`, `{"after":"orders"}`, `{"after":7}`},
	protocol.VerbDelete: {`{"x":1}`, `nope`},
	protocol.VerbDLQ: {``, `{"group":"g","limit":5,"after":"x"}`, `{"replay":["d-1"]}`, `{"purge":["d-1"]}`, `{"replay":[],"purge":[]}`,
		`{"replay":["bogus"]}`, "{\"group\":\"\xff\"}"},
	protocol.VerbSeek: {``, `{"to":"start"}`, `{"group":"g","partition":"p","to":"end"}`, `{"to":"2026-11-30T10:00:00Z"}`, `{"to":7}`,
		`{"group":"\ud800\u0041","to":"end"}`},
	protocol.VerbGroups: {``, `{}`, `{"delete":"billing"}`, `{"delete":""}`, `{"delete":null}`, `{"delete":7}`,
		`{"delete":"a b"}`, "{\"delete\":\"g\xff\"}", `{"group":"g"}`, `[]`, `{"delete":"` + strings.Repeat("g", 300) + `"}`},
	protocol.VerbPeek: {``, `{}`, `{"partition":"eu","from":0,"limit":100}`, `{"partition":"eu","id":"order-8"}`, `{"from":-1}`,
		`{"limit":0}`, `{"limit":1001}`, `{"id":"x","from":3}`, `{"from":"0"}`, `{"group":"g"}`, "{\"partition\":\"\xff\"}",
		`{"id":"\udc00"}`, `{"from":9223372036854775807,"limit":1000}`},
}

// ReferencePush is a push of n messages in the loader's reference shape:
// partitions p-0 … p-199 in turn, data a 256-byte JSON string.
func ReferencePush(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"messages":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"partition":"p-` + strconv.Itoa(i%200) + `","data":"` + strings.Repeat("abcdefgh", 31) + `1234567"}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}
