package ckpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestArenaResize(t *testing.T) {
	tests := []struct {
		name       string
		saves      []int64
		wantStep   int64 // kept after the resize; 0: none
		wantDrop   int64 // dropped by the resize; 0: none
		oldInSlot1 bool  // the other mapping's snapshot is in slot 1, so it is invalidated
	}{
		{"empty", nil, 0, 0, false},
		{"newest in slot 0", []int64{1, 2, 3}, 3, 2, false},
		{"newest in slot 1", []int64{1, 2}, 2, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newArena(t, 4096)
			for _, s := range tt.saves {
				save(t, a, s, payload(s, 3000+int(s)))
			}
			other := openAgain(t, a)
			before, hadBefore := other.Latest()
			_, pending, _ := a.BeginWrite(50) // a write in progress goes stale
			if err := a.Resize(40000); err != nil {
				t.Fatal(err)
			}
			if got, want := a.SlotSize(), int64(40960); got != want {
				t.Errorf("SlotSize = %d, want %d", got, want)
			}
			if err := a.Commit(pending, 1); !errors.Is(err, ErrStaleToken) {
				t.Errorf("Commit of a write begun before Resize = %v, want ErrStaleToken", err)
			}
			for _, h := range []*Arena{a, other} { // the other mapping follows
				snap, ok := h.Latest()
				if tt.wantStep == 0 {
					if ok {
						t.Errorf("Latest = step %d, want none", snap.Step)
					}
					continue
				}
				if !ok || snap.Step != tt.wantStep || !bytes.Equal(snap.Data, payload(tt.wantStep, 3000+int(tt.wantStep))) {
					t.Errorf("Latest = step %d (ok %v), want step %d intact", snap.Step, ok, tt.wantStep)
				}
				if _, ok := h.Valid(tt.wantDrop); ok && tt.wantDrop != 0 {
					t.Errorf("Valid(%d) found the older snapshot, which Resize drops", tt.wantDrop)
				}
			}
			if other.SlotSize() != 40960 {
				t.Errorf("other mapping: SlotSize = %d after it was used, want 40960", other.SlotSize())
			}
			if hadBefore {
				err := other.Check(before)
				if tt.oldInSlot1 != errors.Is(err, ErrOverwritten) {
					t.Errorf("Check of a snapshot taken before Resize = %v (it was in slot %d)", err, before.Slot)
				}
			}
			// A state that needed the resize now fits, and alternates.
			for _, s := range []int64{100, 101} {
				save(t, a, s, payload(s, 40000))
				if snap, ok := other.Latest(); !ok || snap.Step != s || !bytes.Equal(snap.Data, payload(s, 40000)) {
					t.Errorf("after Resize: Latest = step %d (ok %v), want %d", snap.Step, ok, s)
				}
			}
			if err := a.Resize(100); err != nil || a.SlotSize() != 40960 {
				t.Errorf("Resize smaller = %v, SlotSize %d; want a no-op", err, a.SlotSize())
			}
			fi, _ := os.Stat(a.Path())
			if fi.Size() != arenaHeaderSize+2*40960 {
				t.Errorf("file size %d, want %d", fi.Size(), arenaHeaderSize+2*40960)
			}
		})
	}
}

func TestCreateArenaShmTooSmall(t *testing.T) {
	t.Run("injected", func(t *testing.T) {
		orig := fallocate
		defer func() { fallocate = orig }()
		fallocate = func(int, uint32, int64, int64) error { return unix.ENOSPC }
		dir := arenaDir(t)
		_, err := CreateArena(dir, "a", 1<<30)
		checkShmError(t, err, "2.0 GiB")
		if _, err := os.Stat(filepath.Join(dir, "a")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the failed arena's file was left behind: %v", err)
		}
	})
	t.Run("real", func(t *testing.T) {
		// Twice the slot size is more than any file system here holds; on
		// tmpfs fallocate gives up at once.
		_, err := CreateArena(arenaDir(t), "a", 1<<52)
		checkShmError(t, err, "")
	})
	t.Run("resize", func(t *testing.T) {
		a := newArena(t, 4096)
		save(t, a, 1, payload(1, 100))
		orig := fallocate
		defer func() { fallocate = orig }()
		fallocate = func(int, uint32, int64, int64) error { return unix.ENOSPC }
		checkShmError(t, a.Resize(1<<20), "2.0 MiB")
		if snap, ok := a.Latest(); !ok || snap.Step != 1 || a.SlotSize() != 4096 {
			t.Error("a failed Resize changed the arena")
		}
	})
}

func checkShmError(t *testing.T, err error, needed string) {
	t.Helper()
	if !errors.Is(err, ErrShmTooSmall) {
		t.Fatalf("err = %v, want ErrShmTooSmall", err)
	}
	for _, s := range []string{"needs", "free", "--shm-size", "medium: Memory", "sizeLimit"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if needed != "" && !strings.Contains(err.Error(), needed) {
		t.Errorf("error %q does not say %s were needed", err, needed)
	}
}

func TestCreateArenaDir(t *testing.T) {
	base := t.TempDir()
	tests := []struct {
		name  string
		setup func(dir string) // prepares dir (which does not exist yet)
		file  string
		want  error // nil: created
	}{
		{"missing dir is created", func(string) {}, "a", nil},
		{"sticky world-writable dir", func(d string) { mkdir(t, d, 0o777|fs.ModeSticky) }, "a", nil},
		{"world-writable dir", func(d string) { mkdir(t, d, 0o777) }, "a", ErrInvalidInput},
		{"dir is a file", func(d string) { os.WriteFile(d, nil, 0o600) }, "a", ErrInvalidInput},
		{"slash in name", func(string) {}, "a/b", ErrInvalidInput},
		{"dot dot", func(string) {}, "..", ErrInvalidInput},
		{"empty name", func(string) {}, "", ErrInvalidInput},
		{"exists", func(d string) { mkdir(t, d, 0o700); os.WriteFile(filepath.Join(d, "a"), nil, 0o600) }, "a", fs.ErrExist},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(base, string(rune('a'+i)), "arenas")
			if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
				t.Fatal(err)
			}
			tt.setup(dir)
			a, err := CreateArena(dir, tt.file, 4096)
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Errorf("CreateArena = %v, want %v", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a.Close()
			fi, _ := os.Stat(dir)
			if tt.name == "missing dir is created" && fi.Mode().Perm() != 0o700 {
				t.Errorf("created dir has mode %v, want 0700", fi.Mode().Perm())
			}
		})
	}
	if _, err := CreateArena(base, "a", 0); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("slot size 0: %v, want ErrInvalidInput", err)
	}
}

func mkdir(t *testing.T, dir string, mode fs.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func TestOpenArenaRejects(t *testing.T) {
	dir := arenaDir(t)
	a, err := CreateArena(dir, "good", 4096)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	good, _ := os.ReadFile(filepath.Join(dir, "good"))
	write := func(name string, data []byte, mode fs.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, name), mode)
	}
	badMagic := bytes.Clone(good)
	copy(badMagic, "NOTARENA")
	badVersion := bytes.Clone(good)
	badVersion[hdrVersion] = 2
	write("open-to-all", good, 0o644)
	write("bad-magic", badMagic, 0o600)
	write("bad-version", badVersion, 0o600)
	write("short", good[:100], 0o600)
	write("truncated", good[:len(good)-4096], 0o600)
	os.Symlink(filepath.Join(dir, "good"), filepath.Join(dir, "link"))
	os.Mkdir(filepath.Join(dir, "dir"), 0o700)
	tests := []struct {
		name string
		want error
		msg  string
	}{
		{"open-to-all", ErrBadArena, "0600"},
		{"bad-magic", ErrBadArena, "magic"},
		{"bad-version", ErrBadArena, "version 2"},
		{"short", ErrBadArena, "less than a header"},
		{"truncated", ErrBadArena, "slot size"},
		{"dir", unix.EISDIR, ""},
		{"missing", fs.ErrNotExist, ""},
		{"link", unix.ELOOP, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := OpenArena(dir, tt.name)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("OpenArena = %v, want %v mentioning %q", err, tt.want, tt.msg)
			}
		})
	}
	if b, err := OpenArena(dir, "good"); err != nil {
		t.Errorf("OpenArena(good) = %v", err)
	} else {
		b.Close()
	}
}

func TestParseArenaHeader(t *testing.T) {
	const size = arenaHeaderSize + 2*arenaPage
	le := binary.LittleEndian
	tests := []struct {
		name string
		edit func(b []byte)
		size int64
		want string // "" accepted
	}{
		{"fresh", func([]byte) {}, size, ""},
		{"bigger file", func([]byte) {}, size + arenaPage, ""},
		{"magic", func(b []byte) { b[0] = 'X' }, size, "magic"},
		{"version", func(b []byte) { le.PutUint32(b[hdrVersion:], 9) }, size, "version 9"},
		{"header size", func(b []byte) { le.PutUint32(b[hdrVersion+4:], 512) }, size, "header size 512"},
		{"zero slot size", func(b []byte) { le.PutUint64(b[hdrSlotSize:], 0) }, size, "slot size 0"},
		{"unaligned slot size", func(b []byte) { le.PutUint64(b[hdrSlotSize:], 100) }, size, "slot size 100"},
		{"file too small", func([]byte) {}, size - 1, "slot size 4096"},
		{"file smaller than header", func([]byte) {}, 100, "smaller than"},
		{"newest", func(b []byte) { le.PutUint64(b[hdrNewest:], 3) }, size, "newest slot 3"},
		{"state", func(b []byte) { le.PutUint64(b[hdrSlots+slotHdrSize+slState:], 3) }, size, "slot 1 has state 3"},
		{"length", func(b []byte) {
			le.PutUint64(b[hdrSlots+slState:], uint64(SlotValid))
			le.PutUint64(b[hdrSlots+slLength:], arenaPage+1)
		}, size, "slot 0 holds 4097 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := make([]byte, arenaHeaderSize)
			initArenaHeader(b, arenaPage)
			tt.edit(b)
			lay, err := parseArenaHeader(b, tt.size)
			if tt.want == "" {
				if err != nil || lay.slotSize != arenaPage {
					t.Errorf("parseArenaHeader = %+v, %v; want slot size %d", lay, err, arenaPage)
				}
				return
			}
			if !errors.Is(err, ErrBadArena) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseArenaHeader = %v, want ErrBadArena mentioning %q", err, tt.want)
			}
		})
	}
	if got := SlotValid.String() + SlotWriting.String() + SlotEmpty.String() + SlotState(7).String(); got != "validwritingemptySlotState(7)" {
		t.Errorf("SlotState strings: %q", got)
	}
}
