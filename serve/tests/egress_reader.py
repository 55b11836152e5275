"""Reads back what serve/tests/egress.rs uploaded, with each service's own client (boto3 for
S3, azure-storage-blob and azure-storage-queue for Azure), from the venv that
scripts/egress-peers.sh installs. Raw bytes go to stdout for `get`; everything else is JSON.

    s3 get|head ENDPOINT BUCKET KEY      s3 state ENDPOINT BUCKET
    blob get|head CONN CONTAINER NAME    blob list CONN CONTAINER
    queue receive CONN QUEUE             sas CONN
    cert DIR      (ca.pem, and cert.pem and key.pem for 127.0.0.1 signed by it)

With DSIPC_READER_CA=FILE, the Azure clients trust FILE for https:// endpoints.
"""
import datetime
import json
import os
import sys


def s3(endpoint):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(s3={"addressing_style": "path"}),
    )


def main(argv):
    kind, verb = argv[0], argv[1]  # `sas CONN`: verb is the connection string
    if kind == "s3":
        client = s3(argv[2])
        if verb == "get":
            body = client.get_object(Bucket=argv[3], Key=argv[4])["Body"]
            for chunk in iter(lambda: body.read(1 << 20), b""):
                sys.stdout.buffer.write(chunk)
        elif verb == "head":
            h = client.head_object(Bucket=argv[3], Key=argv[4])
            print(json.dumps({"content_type": h["ContentType"], "metadata": h["Metadata"],
                              "length": h["ContentLength"]}))
        elif verb == "state":
            keys = [o["Key"] for o in client.list_objects_v2(Bucket=argv[3]).get("Contents", [])]
            uploads = [u["Key"] for u in
                       client.list_multipart_uploads(Bucket=argv[3]).get("Uploads", [])]
            print(json.dumps({"keys": keys, "uploads": uploads}))
    elif kind == "blob":
        from azure.storage.blob import BlobServiceClient

        verify = os.environ.get("DSIPC_READER_CA", True)
        service = BlobServiceClient.from_connection_string(argv[2], connection_verify=verify)
        container = service.get_container_client(argv[3])
        if verb == "get":
            stream = container.download_blob(argv[4])
            for chunk in stream.chunks():
                sys.stdout.buffer.write(chunk)
        elif verb == "head":
            p = container.get_blob_client(argv[4]).get_blob_properties()
            print(json.dumps({"content_type": p.content_settings.content_type,
                              "metadata": p.metadata, "length": p.size}))
        elif verb == "list":
            names = [b.name for b in container.list_blobs()] if container.exists() else []
            print(json.dumps({"blobs": names}))
    elif kind == "queue":
        from azure.storage.queue import QueueClient, TextBase64DecodePolicy

        queue = QueueClient.from_connection_string(
            argv[2], argv[3], message_decode_policy=TextBase64DecodePolicy())
        print(json.dumps([m.content for m in queue.receive_messages()]))
    elif kind == "sas":
        from azure.storage.blob import (AccountSasPermissions, BlobServiceClient, ResourceTypes,
                                        generate_account_sas)

        service = BlobServiceClient.from_connection_string(verb)
        print(generate_account_sas(
            service.account_name, service.credential.account_key,
            resource_types=ResourceTypes(service=True, container=True, object=True),
            permission=AccountSasPermissions(read=True, write=True, create=True, list=True,
                                             add=True),
            expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)))
    elif kind == "cert":
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        # A private CA (ca.pem) and the server's certificate it signs (cert.pem, key.pem).
        now = datetime.datetime.now(datetime.timezone.utc)

        def build(subject, issuer, public_key, signing_key, ca):
            b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                 .public_key(public_key).serial_number(x509.random_serial_number())
                 .not_valid_before(now - datetime.timedelta(hours=1))
                 .not_valid_after(now + datetime.timedelta(days=1))
                 .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
            if not ca:
                b = b.add_extension(x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            return b.sign(signing_key, hashes.SHA256())

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dsipc test CA")])
        ca = build(ca_name, ca_name, ca_key.public_key(), ca_key, True)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
        cert = build(name, ca_name, key.public_key(), ca_key, False)
        for file, data in (("ca.pem", ca.public_bytes(serialization.Encoding.PEM)),
                           ("cert.pem", cert.public_bytes(serialization.Encoding.PEM)),
                           ("key.pem", key.private_bytes(
                               serialization.Encoding.PEM,
                               serialization.PrivateFormat.TraditionalOpenSSL,
                               serialization.NoEncryption()))):
            with open(os.path.join(verb, file), "wb") as f:
                f.write(data)
    else:
        sys.exit("unknown command " + " ".join(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
