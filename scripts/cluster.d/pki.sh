# shellcheck shell=bash
# The certificates, tokens and kubeconfig of scripts/cluster, made anew at each `up`. Sourced
# by scripts/cluster, which provides the paths (and scripts/lib.sh's log).

# --- certificates, token, kubeconfig --------------------------------------------------------------

gen_pki() {
  local SAN_NODE_IP=""
  if real_node_wanted; then SAN_NODE_IP=$(node_ip || true); fi
  mkdir -p "$PKI" "$STATE/auth"
  chmod 700 "$PKI" "$STATE/auth"
  cat >"$PKI/openssl.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = mutantops-test
[ca]
default_ca = test_ca
[test_ca]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any_name
unique_subject = no
[any_name]
commonName = supplied
organizationName = optional
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = IP:127.0.0.1,${SAN_NODE_IP:+IP:$SAN_NODE_IP,}DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:$FIRST_SERVICE_IP
[v3_client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = clientAuth
CNF
  (
    cd "$PKI"
    # RSA 2048 throughout: what kubeadm uses, accepted by rustls/ring and Go alike. The
    # serving cert is a separate leaf signed by the CA: rustls rejects a CA cert as the leaf.
    # Both are valid from two days ago, as the certificates of a cluster that has run for a
    # while are: a client whose clock is behind (the leader-election skew test runs one an
    # hour behind) still accepts them. `openssl ca` because `openssl x509` (3.0) cannot
    # backdate.
    : >index.txt
    openssl rand -hex 16 >serial
    local start
    start=$(date -u -d '-2 days' +%Y%m%d%H%M%SZ)
    openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out ca.key
    openssl req -new -key ca.key -config openssl.cnf -subj /CN=mutantops-test-ca -out ca.csr
    openssl ca -batch -selfsign -notext -config openssl.cnf -keyfile ca.key -in ca.csr \
      -startdate "$start" -days 3650 -extensions v3_ca -out ca.crt 2>/dev/null
    openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out apiserver.key
    openssl req -new -key apiserver.key -config openssl.cnf -subj /CN=kube-apiserver -out apiserver.csr
    openssl ca -batch -notext -config openssl.cnf -cert ca.crt -keyfile ca.key -in apiserver.csr \
      -startdate "$start" -days 365 -extensions v3_server -out apiserver.crt 2>/dev/null
    # Service-account token signing key pair.
    openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
    openssl pkey -in sa.key -pubout -out sa.pub
    # The API server's client certificate for the kubelets (logs, exec, port-forward on the
    # real node); the real kubelet trusts the CA's client certificates only.
    openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out kubelet-client.key
    openssl req -new -key kubelet-client.key -config openssl.cnf \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" -out kubelet-client.csr
    openssl ca -batch -notext -config openssl.cnf -cert ca.crt -keyfile ca.key -in kubelet-client.csr \
      -startdate "$start" -days 365 -extensions v3_client -out kubelet-client.crt 2>/dev/null
    openssl verify -CAfile ca.crt apiserver.crt kubelet-client.crt >/dev/null
  ) || { log "generating certificates with openssl failed"; return 1; }
  # Static token of a cluster admin (group system:masters).
  ADMIN_TOKEN=$(openssl rand -hex 32)
  printf '%s,admin,admin,"system:masters"\n' "$ADMIN_TOKEN" >"$TOKEN_FILE"
  if real_node_wanted; then node_tokens; fi
  chmod 600 "$TOKEN_FILE"
}

write_kubeconfig() {
  local ca tmp
  ca=$(base64 -w0 <"$PKI/ca.crt")
  tmp=$KUBECONFIG_FILE.tmp
  (umask 077 && cat >"$tmp" <<KC
apiVersion: v1
kind: Config
clusters:
- name: mutantops-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $ADMIN_TOKEN
contexts:
- name: mutantops-test
  context:
    cluster: mutantops-test
    user: admin
    namespace: default
current-context: mutantops-test
KC
  )
  mv "$tmp" "$KUBECONFIG_FILE"
}
