// Package encryption keeps provider credentials encrypted at rest: a key
// ring of AES-256-GCM keys read from --encryption-key-file, one of them
// current, in the spirit of Kubernetes' EncryptionConfiguration.
//
// The file is YAML, mode 0600:
//
//	current: k2
//	keys:
//	  - name: k1
//	    secret: <base64 of 32 random bytes>
//	  - name: k2
//	    secret: <base64 of 32 random bytes>
//
// A sealed value names its key beside the ciphertext:
//
//	"\x00enc:v1:" + key name + ":" + base64(nonce || ciphertext || tag)
//
// The NUL byte that starts it cannot start a credential the API accepts
// (credential values are refused with a NUL), so a value is sealed exactly
// when it has the prefix. The additional data of each seal binds it to its
// place (workspace, provider, credential name): a sealed value copied to
// another provider or another credential does not open.
//
// Values are sealed with the current key and opened with whichever key
// they name, so a ring with the old key and a new current one reads every
// record while `shoal admin rotate-encryption-key` re-seals them.
package encryption
