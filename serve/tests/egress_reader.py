"""Reads back what serve/tests/egress.rs uploaded, with each service's own client (boto3 for
S3, azure-storage-blob and azure-storage-queue for Azure), from the venv that
scripts/egress-peers.sh installs. Raw bytes go to stdout for `get`; everything else is JSON.

    s3 get|head ENDPOINT BUCKET KEY      s3 state ENDPOINT BUCKET
    blob get|head CONN CONTAINER NAME    blob list CONN CONTAINER
    queue receive CONN QUEUE             sas CONN
"""
import datetime
import json
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

        container = BlobServiceClient.from_connection_string(argv[2]).get_container_client(argv[3])
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
    else:
        sys.exit("unknown command " + " ".join(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
