package dnsrec

// ColumnDoc says what a column of Schema holds, for the generated
// reference (docs/reference/records.md; a test fails when a column has
// none).
type ColumnDoc struct {
	Meaning string
	// Tshark is the tshark field holding the same value, where there is
	// one (the oracle tests compare the records with most of them).
	Tshark string
	// Option is the stage argument that changes or empties the column.
	Option string
}

// ColumnDocs are the docs of Schema's columns, by name.
var ColumnDocs = map[string]ColumnDoc{
	"instance":          {Meaning: "the site (block instance) the message was captured at"},
	"seq":               {Meaning: "the sequence number of the capture block the row came out of"},
	"time":              {Meaning: "capture time of the frame that completed the message (the last fragment, the last TCP segment)", Tshark: "frame.time_epoch"},
	"src":               {Meaning: "source address (the inner packet's, for tunnelled DNS)", Tshark: "ip.src / ipv6.src"},
	"dst":               {Meaning: "destination address", Tshark: "ip.dst / ipv6.dst"},
	"sport":             {Meaning: "source port", Tshark: "udp.srcport / tcp.srcport"},
	"dport":             {Meaning: "destination port", Tshark: "udp.dstport / tcp.dstport"},
	"transport":         {Meaning: "udp or tcp; from dnstap also dot, doh, doq, dnscrypt-udp, dnscrypt-tcp"},
	"ip_version":        {Meaning: "4 or 6"},
	"size":              {Meaning: "the DNS message's length in bytes, without the TCP length prefix", Tshark: "udp.length - 8, dns.length (TCP)"},
	"id":                {Meaning: "the message id", Tshark: "dns.id"},
	"qr":                {Meaning: "true for a response", Tshark: "dns.flags.response"},
	"opcode":            {Meaning: "the opcode (0 query, 4 notify, 5 update)", Tshark: "dns.flags.opcode"},
	"aa":                {Meaning: "authoritative answer flag", Tshark: "dns.flags.authoritative"},
	"tc":                {Meaning: "truncated flag", Tshark: "dns.flags.truncated"},
	"rd":                {Meaning: "recursion desired flag", Tshark: "dns.flags.recdesired"},
	"ra":                {Meaning: "recursion available flag", Tshark: "dns.flags.recavail"},
	"ad":                {Meaning: "authentic data flag", Tshark: "dns.flags.authenticated"},
	"cd":                {Meaning: "checking disabled flag", Tshark: "dns.flags.checkdisable"},
	"rcode":             {Meaning: "response code, with the EDNS extended bits above the header's four", Tshark: "dns.flags.rcode"},
	"qdcount":           {Meaning: "question count from the header", Tshark: "dns.count.queries"},
	"ancount":           {Meaning: "answer count from the header", Tshark: "dns.count.answers"},
	"nscount":           {Meaning: "authority count from the header", Tshark: "dns.count.auth_rr"},
	"arcount":           {Meaning: "additional count from the header", Tshark: "dns.count.add_rr"},
	"qname":             {Meaning: "the first question's name, lower-cased, without the final dot (\".\" for the root); null without a question", Tshark: "dns.qry.name (lower-cased)"},
	"qtype":             {Meaning: "the first question's type", Tshark: "dns.qry.type"},
	"qclass":            {Meaning: "the first question's class", Tshark: "dns.qry.class"},
	"edns":              {Meaning: "the message has an OPT record"},
	"edns_version":      {Meaning: "EDNS version; null without EDNS"},
	"edns_udp_size":     {Meaning: "the UDP payload size the OPT record advertises; null without EDNS", Tshark: "dns.rr.udp_payload_size"},
	"edns_do":           {Meaning: "the DNSSEC OK bit (not `do`: a reserved word in SQL)", Tshark: "dns.resp.z.do"},
	"edns_options":      {Meaning: "the OPT record's options: list of {code, data}"},
	"malformed":         {Meaning: "the message did not read whole; what it held before the fault is kept"},
	"error":             {Meaning: "why a malformed message is malformed, where in its bytes"},
	"qname_raw":         {Option: "?names=", Meaning: "the first question's name as sent, where that differs from qname (0x20 case randomisation); null otherwise: coalesce(qname_raw, qname) is every name as sent"},
	"labels":            {Option: "?names=", Meaning: "labels in qname (0 for the root)"},
	"tld":               {Option: "?names=", Meaning: "the last label of qname"},
	"registered_domain": {Option: "?names=", Meaning: "public suffix plus one label of qname (golang.org/x/net/publicsuffix); null for a suffix itself"},
	"answers":           {Meaning: "answer records: list of {name, type, class, ttl, rdata}, rdata as dig prints it", Tshark: "dns.a, dns.aaaa, dns.cname, dns.ns, dns.ptr.domain_name, dns.mx.mail_exchange, dns.resp.ttl", Option: "?sections= (null when not read)"},
	"authority":         {Meaning: "authority records, as answers", Tshark: "dns.soa.mname, dns.ns, dns.nsec.next_domain_name, dns.nsec3.hash_value", Option: "?sections= (null when not read)"},
	"additional":        {Meaning: "additional records but the OPT record, as answers", Option: "?sections= (null when not read)"},
	"ecs_family":        {Meaning: "EDNS client subnet (RFC 7871): address family (1 IPv4, 2 IPv6); null without one", Tshark: "dns.opt.client.family"},
	"ecs_source_prefix": {Meaning: "client subnet source prefix length", Tshark: "dns.opt.client.netmask"},
	"ecs_scope_prefix":  {Meaning: "client subnet scope prefix length", Tshark: "dns.opt.client.scope"},
	"ecs_address":       {Meaning: "client subnet address", Tshark: "dns.opt.client.addr4 / addr6"},
	"ede":               {Meaning: "extended DNS error codes (RFC 8914)", Tshark: "dns.opt.ext_error.info_code"},
	"ede_text":          {Meaning: "extended DNS errors' texts, joined with \"; \""},
	"cookie":            {Meaning: "the message carries a DNS cookie option (RFC 7873)"},
	"tunnel":            {Meaning: "vxlan or geneve for DNS taken out of those tunnels; null otherwise"},
	"dnstap_type":       {Meaning: "for rows read from dnstap, the message type the server logged (AUTH_QUERY, CLIENT_RESPONSE...); null for packets"},
	"dnstap_identity":   {Meaning: "for rows read from dnstap, the identity the server gave itself; null for packets"},
	"tcp_rtt":           {Meaning: "over TCP, from the SYN of the side that sent this message to its ACK of the SYN-ACK: the client's round trip where a server captures; null for the other side's messages, over UDP, and where the handshake was not in the capture", Tshark: "tcp.analysis.initial_rtt"},
	"sample_rate":       {Meaning: "the N of the agent's --sample 1/N the capture was cut with (1: every packet): the row stands for N like it, so counts scale back to totals by it"},
	"partial":           {Meaning: "the row is the start of a message whose other bytes never came (a datagram's other fragments, a TCP stream let go of); also malformed"},
}
