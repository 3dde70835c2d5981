#!/usr/bin/env python3
"""seeds_conn.py: writes the seed corpus of fuzz_conn (tests/fuzz/corpus/conn).

Each seed is fuzz_conn's input: a configuration byte, a schedule seed, then
a client's byte stream in the frame format of mt-frame(5) (src/wire/frame.h)
for the server fuzz_conn.c makes: 24 kHz, 16-sample frames when the seed
byte's top bit is clear, synthetic:tiny's own 1920 when it is set (a few
seeds, kept small: an 88-byte AUDIO frame instead of 3,896 lets the fuzzer
run a whole session a hundred times as often). Run it from the repository
root when the format changes; the files are committed. The corpus also
holds inputs the fuzzer found that once failed (NAME_found), which this
script leaves alone."""
import os
import struct

RATE, FS, FS_REAL = 24000, 16, 1920
REAL = 0x80    # seed byte: the server's frames are FS_REAL samples
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "conn")
HELLO, AUDIO, TOKENS, END, ACCEPT, REJECT, ERROR = 1, 2, 3, 4, 5, 6, 7


def frame(ftype, payload=b"", seq=0, flags=0, magic=b"MTFR", version=1):
    return struct.pack("<4sBBHIIQQQQII", magic, version, ftype, flags, 0, seq,
                       1000 + seq, 0, 0, 0, len(payload), 0) + payload


def hello(rate=RATE, fs=FS, channels=1, enc=1, model=b"synthetic:tiny", token=None):
    tail = b"" if token is None else b"\0" + token
    return frame(HELLO, struct.pack("<IIHH", rate, fs, channels, enc) + model + tail)


def audio(seq, fs=FS):
    pcm = struct.pack("<h", seq) + bytes(fs * 2 - 2)
    return frame(AUDIO, pcm, seq=seq)


def session(n, end=True, first=1, token=None, fs=FS):
    s = hello(token=token, fs=fs) + b"".join(audio(first + i, fs) for i in range(n))
    return s + (frame(END) if end else b"")


# configuration byte (fuzz_conn.c): 0x01 controlled, 0x02 draining,
# 0x04 full, 0x08 FILL, 0x10 input queue 2, 0x20 small chunks, 0x40 TCP
# with a token, 0x80 slow step
SEEDS = {
    "valid_hello_audio_end": (0x00, 1, session(5)),
    "valid_controlled": (0x01, 2, session(5)),
    "valid_fill_slow_step": (0x88, 3, session(12)),
    "valid_fill_slow_step_long": (0x88, 31, session(44)),
    "valid_small_queue_small_chunks": (0x30, 4, session(8)),
    "eof_without_end": (0x00, 5, session(3, end=False)),
    "eof_inside_audio": (0x00, 6, session(3, end=False) + audio(4)[:60]),
    "eof_inside_hello": (0x00, 7, hello()[:30]),
    "bad_magic": (0x00, 8, frame(HELLO, magic=b"XXXX") + session(2)),
    "bad_magic_after_hello": (0x00, 9, hello() + audio(1)[:20] + b"junk" * 20),
    "bad_version": (0x00, 10, frame(HELLO, version=9)),
    "audio_before_hello": (0x00, 11, audio(1) + session(2)),
    "second_hello": (0x00, 12, hello() + audio(1) + hello() + frame(END)),
    "format_mismatch": (0x00, 13, hello(rate=16000) + audio(1) + frame(END)),
    "mono_only": (0x00, 14, hello(channels=2) + frame(END)),
    "draining": (0x02, 15, session(2)),
    "server_full": (0x04, 16, session(2)),
    "client_error": (0x00, 17, hello() + audio(1) + audio(2) +
                     frame(ERROR, b"client gave up")),
    "audio_before_accept": (0x01, 18, session(4)),
    # the client gives up while the controller has not answered (the
    # connection was left pending with no session: found by the fuzzer)
    "client_error_while_pending": (0x01, 34, hello() + frame(ERROR, b"gave up")),
    "seq_backwards": (0x00, 19, hello() + audio(5) + audio(3) + frame(END)),
    "tokens_frame": (0x00, 20, hello() + frame(TOKENS, b"\x01\x00\x00\x00", seq=1)),
    "short_audio": (0x00, 21, hello() + frame(AUDIO, b"\x00" * 10, seq=1) + frame(END)),
    "fill_flag_from_client": (0x00, 22, hello() + frame(AUDIO, bytes(FS * 2), seq=1,
                                                        flags=1) + frame(END)),
    "accept_from_client": (0x00, 23, hello() + frame(ACCEPT) + frame(END)),
    "end_then_more": (0x00, 24, session(2) + audio(9) + frame(END)),
    "long_session_queue_overflow": (0x10, 25, session(40)),
    "long_session_small_chunks_queue_overflow": (0x30, 32, session(40)),
    "empty": (0x00, 26, b""),
    # 0x40: a TCP connection to a server whose token is fuzz_conn.c's TOKEN
    "tcp_token_right": (0x40, 27, session(4, token=b"fuzz-token-0123456789")),
    "tcp_token_wrong": (0x40, 28, session(2, token=b"fuzz-token-9876543210")),
    "tcp_token_missing": (0x40, 29, session(2)),
    "tcp_token_garbage_first": (0x40, 30, b"GET / HTTP/1.0\r\n\r\n"),
    # the real frame size: a few short streams (3.9 kB a frame: one each,
    # so that libFuzzer's default -max_len, the largest seed, stays 4 kB)
    "real_frames_session": (0x00, REAL | 1, session(1, fs=FS_REAL)),
    "real_frames_small_chunks_fill": (0x28, REAL | 2, session(1, fs=FS_REAL)),
    "real_frames_eof_inside_audio": (0x00, REAL | 3, hello(fs=FS_REAL) +
                                     audio(1, FS_REAL)[:1000]),
    "real_frames_small_frame_sent": (0x00, REAL | 4, hello(fs=FS_REAL) + audio(1) + frame(END)),
    "small_frames_real_frame_sent": (0x00, 33, hello() + audio(1, FS_REAL) + frame(END)),
    "real_frames_format_mismatch": (0x00, REAL | 5, session(1)),
}

os.makedirs(OUT, exist_ok=True)
for name, (cfg, seed, stream) in SEEDS.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([cfg, seed]) + stream)
