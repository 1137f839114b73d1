//! R53: a renderer's answer as the fetch reads it: the head, its framing, a chunked body, each
//! bounded, and what is not HTTP/1.x refused.

use super::*;

fn whole(bytes: &[u8]) -> Head {
    match head(bytes) {
        Ok(Some(h)) => h,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_head_says_its_status_type_and_framing() {
    let h = whole(b"HTTP/1.1 200 OK\r\nContent-Type: image/bmp\r\nContent-Length: 48062\r\n\r\nBM");
    assert_eq!(h.status, 200);
    assert_eq!(h.content_type.as_deref(), Some("image/bmp"));
    assert_eq!(h.framing, Framing::Length(48062));
    assert_eq!(h.len, 67);
    let h = whole(b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\r\n");
    assert_eq!(h.framing, Framing::Chunked);
    // HTTP/1.0 without a length: the body ends where the renderer closes.
    let h = whole(b"HTTP/1.0 200 OK\r\nContent-Type: image/png\r\n\r\n");
    assert_eq!(h.framing, Framing::Close);
    for status in ["204 No Content", "304 Not Modified", "100 Continue"] {
        let text = format!("HTTP/1.1 {status}\r\nContent-Length: 10\r\n\r\n");
        assert_eq!(whole(text.as_bytes()).framing, Framing::None, "{status}");
    }
}

#[test]
fn an_incomplete_head_waits_and_a_bad_one_is_refused() {
    assert_eq!(head(b"HTTP/1.1 200 OK\r\nContent-Ty"), Ok(None));
    assert_eq!(head(b""), Ok(None));
    let endless = [b"HTTP/1.1 200 OK\r\n".as_slice(), &[b'x'; HEAD_MAX]].concat();
    assert_eq!(head(&endless), Err(WireError::HeadTooLarge));
    for bad in [
        b"SSH-2.0-OpenSSH\r\n\r\n".as_slice(),
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
    ] {
        assert!(
            matches!(head(bad), Err(WireError::Malformed(_))),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    // The same Content-Length twice is one length.
    let h = whole(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n");
    assert_eq!(h.framing, Framing::Length(3));
}

#[test]
fn a_chunked_body_is_put_together_and_bounded() {
    let raw = b"4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\n\r\n";
    let want = b"Wikipedia in \r\n\r\nchunks.".to_vec();
    assert_eq!(dechunk(raw, 1024), Ok(Some(want.clone())));
    assert_eq!(dechunk(raw, want.len()), Ok(Some(want.clone())));
    assert_eq!(dechunk(raw, want.len() - 1), Err(WireError::TooLarge));
    // Every prefix short of the last chunk waits for more.
    let last = raw.len() - b"0\r\n\r\n".len() + 3;
    for n in 0..last {
        assert_eq!(dechunk(&raw[..n], 1024), Ok(None), "prefix of {n}");
    }
    // Trailers after the last chunk are not waited for.
    assert_eq!(
        dechunk(b"1\r\nx\r\n0\r\nTrailer: 1\r\n", 10),
        Ok(Some(b"x".to_vec()))
    );
}

#[test]
fn a_bad_chunk_is_refused() {
    for bad in [
        b"zz\r\nxx\r\n0\r\n\r\n".as_slice(),
        b"\r\n",
        b"2\r\nxyz\r\n0\r\n\r\n",
        b"11111111111111111\r\n",
    ] {
        assert!(
            matches!(dechunk(bad, 1024), Err(WireError::Malformed(_))),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let long_line = vec![b'1'; 2000];
    assert!(matches!(
        dechunk(&long_line, 1024),
        Err(WireError::Malformed(_))
    ));
    // A size past the bound is refused before its bytes come.
    assert_eq!(dechunk(b"FFFFFFFF\r\n", 1024), Err(WireError::TooLarge));
}
