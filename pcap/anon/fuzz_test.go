package anon

import (
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// FuzzPacket: any frame, of any link type Plumb reads, is rewritten in
// place without a panic and without a byte added or lost.
func FuzzPacket(f *testing.F) {
	f.Add(uint8(0), []byte("\x45\x00\x00\x1c\x00\x00\x00\x00\x40\x11\x00\x00\xc0\x00\x02\x01\xc6\x33\x64\x07\x00\x35\x9c\x40\x00\x08\x00\x00"))
	f.Add(uint8(0), []byte("\x60\x00\x00\x00\x00\x08\x3a\x40"+string(make([]byte, 32))+"\x01\x00\x00\x00\x00\x00\x00\x00"))
	f.Add(uint8(1), []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x08\x00\x45\x00\x00\x1c\x00\x00\x20\x00\x40\x01\x00\x00\x0a\x00\x00\x01\x0a\x00\x00\x02\x03\x03\x00\x00\x00\x00\x00\x00"))
	links := []layers.LinkType{layers.LinkTypeRaw, layers.LinkTypeEthernet, layers.LinkTypeLinuxSLL, layers.LinkTypeNull}
	a, err := New(Config{Key: make([]byte, 32), RData: true, Clients: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, link uint8, frame []byte) {
		n := len(frame)
		a.Packet(links[int(link)%len(links)], frame)
		if len(frame) != n {
			t.Fatalf("the frame changed length")
		}
	})
}
